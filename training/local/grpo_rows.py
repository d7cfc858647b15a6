"""One GRPO step's samples as rollout-store rows (`training.rollouts`): what was generated, how each
reward component scored it, the advantage it got and, per token, how far the policy moved from the
reference."""
from __future__ import annotations

from typing import Any

import torch

from training.local.common import Rollout


def _r(value: float, digits: int = 4) -> float:
    return round(float(value), digits)


def rollout_rows(*, step: int, prompts: list[str], rows: list[dict], ro: Rollout, results: list, names: list[str],
                 advantages: torch.Tensor, logratio: torch.Tensor | None, tok: Any, group_size: int,
                 max_response_length: int, entropy: torch.Tensor | None = None,
                 train_logp: torch.Tensor | None = None) -> list[dict[str, Any]]:
    """Rows for `samples/rollout/<step>.jsonl`: prompt i owns samples i*n .. i*n+n-1 (uid "<step>:<i>").

    Per token, besides the KL log-ratio: the policy's entropy, and the training pass's log-prob minus the
    one the rollout sampled the token with (when the rollout recorded it)."""
    mask = ro.response_mask
    resp_ids = ro.input_ids[:, ro.prompt_len:]
    lengths = [int(n) for n in mask.sum(-1).tolist()]
    ids_of = [resp_ids[j, :n].tolist() for j, n in enumerate(lengths)]
    # each distinct token of the step decoded once (a step repeats a few thousand ids many times over)
    text_of = {t: tok.decode([t]) for t in {t for ids in ids_of for t in ids}}
    out = []
    for j, (text, res) in enumerate(zip(ro.texts, results, strict=True)):
        i = j // group_size
        length, ids = lengths[j], ids_of[j]
        out.append({
            "input": prompts[i], "output": text, "gts": rows[i].get("ground_truth"), "score": float(res.score),
            "step": step, "data_source": str(rows[i].get("data_source") or "default"),
            "extra_info": rows[i].get("extra_info") or {},  # what the reward got: re-scoring passes it again
            "uid": f"{step}:{i}", "sample_index": j % group_size,
            "components": dict(zip(names, res.components, strict=True)),
            "errors": {n: e for n, e in zip(names, res.errors, strict=True) if e},
            "extras": {n: x for n, x in zip(names, res.extras, strict=True) if x},
            "reward_logs": {n: lg for n, lg in zip(names, res.logs, strict=True) if lg},  # what each reward printed
            # GRPO's outcome advantage is the same on every response token: take the first
            "advantage": float(advantages[j, 0]) if length else 0.0,
            # cut at the length limit before an end-of-sequence token
            "response_length": length,
            "truncated": length >= max_response_length and (not ids or ids[-1] != tok.eos_token_id),
            "tokens": [text_of[t] for t in ids],
            **({"token_logratio": [_r(v) for v in logratio[j, :length].tolist()]} if logratio is not None else {}),
            **_token_extras(j, length, entropy, train_logp, ro.logprobs),
        })
    return out


def _token_extras(j: int, length: int, entropy: torch.Tensor | None, train_logp: torch.Tensor | None,
                  rollout_logp: torch.Tensor | None) -> dict[str, list[float]]:
    out = {}
    if entropy is not None:
        out["token_entropy"] = [_r(v) for v in entropy[j, :length].tolist()]
    if train_logp is not None and rollout_logp is not None:
        out["token_logprob_diff"] = [_r(v) for v in (train_logp[j, :length] - rollout_logp[j, :length]).tolist()]
    return out
