"""Pieces every local trainer shares: seeding, RNG state, metrics file, rollouts, log-probs."""
from __future__ import annotations

import inspect
import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessorList

from training.local.token_stats import ChosenLogprobs


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def clean_number(value: Any) -> float | None:
    """A JSON-safe number: tensors become floats, NaN and inf become None (null)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.detach().float().item()
    value = float(value)
    return value if math.isfinite(value) else None


class MetricsLogger:
    """VERL file-logger format: one `{"step": N, "data": {...}}` line per call.

    It appends rather than truncates: the web app merges attempts by step anyway.
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, data: dict[str, Any], step: int) -> None:
        line = json.dumps({"step": int(step), "data": {k: clean_number(v) for k, v in sorted(data.items())}})
        if self.path:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        print(line, flush=True)


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, as HF generate and VERL compute them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def eos_ids(model, tok) -> set[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    out = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tok.eos_token_id is not None:
        out.add(tok.eos_token_id)
    return out


def encode_prompts(tok, texts: list[str], device: torch.device) -> dict[str, torch.Tensor]:
    """Left-padded prompt ids; no special tokens added (chat templates carry their own, as in VERL)."""
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return {"input_ids": enc.input_ids.to(device), "attention_mask": enc.attention_mask.to(device)}


@dataclass
class Rollout:
    input_ids: torch.Tensor  # (N, P+R) left-padded prompt, then response
    attention_mask: torch.Tensor  # (N, P+R)
    response_mask: torch.Tensor  # (N, R) float, 1 up to and including the first EOS
    prompt_len: int
    texts: list[str]  # decoded responses, special tokens dropped
    logprobs: torch.Tensor | None = None  # (N, R) the sampler's log-prob of each response token, when recorded

    @property
    def response_len(self) -> int:
        return self.input_ids.shape[1] - self.prompt_len


def response_mask_from(resp: torch.Tensor, eos: set[int]) -> torch.Tensor:
    """1 for every token up to and including the first EOS, 0 after it."""
    is_eos = torch.zeros_like(resp, dtype=torch.bool)
    for e in eos:
        is_eos |= resp == e
    after = (is_eos.long().cumsum(1) - is_eos.long()) > 0
    return (~after).float()


@torch.no_grad()
def rollout(model, tok, prompts: list[str], n: int, max_response_length: int, *, greedy: bool = False,
            temperature: float = 1.0, device: torch.device | None = None, record_logprobs: bool = False) -> Rollout:
    """Generate `n` responses per prompt (grouped: prompt i owns rows i*n .. i*n+n-1); `record_logprobs` keeps
    the log-prob the sampler gave each token (`training.local.token_stats`)."""
    device = device or next(model.parameters()).device
    enc = encode_prompts(tok, prompts, device)
    was_training = model.training
    model.eval()
    kwargs: dict[str, Any] = {"max_new_tokens": max_response_length, "pad_token_id": tok.pad_token_id,
                              "eos_token_id": sorted(eos_ids(model, tok)), "num_return_sequences": n}
    if greedy:
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    else:  # plain sampling, as VERL's rollout engines do by default (no top-k/top-p)
        kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    recorder = ChosenLogprobs(1.0 if greedy else temperature) if record_logprobs else None
    if recorder is not None:
        kwargs["logits_processor"] = LogitsProcessorList([recorder])
    cache = _shared_prompt_cache(model, enc, n)
    if cache is not None:  # the rows as generate would expand them, the prompt but its last token already run
        kwargs.pop("num_return_sequences")
        out = model.generate(input_ids=enc["input_ids"].repeat_interleave(n, 0),
                             attention_mask=enc["attention_mask"].repeat_interleave(n, 0), past_key_values=cache,
                             **kwargs)
    else:
        out = model.generate(**enc, **kwargs)
    model.train(was_training)
    plen = enc["input_ids"].shape[1]
    resp = out[:, plen:]
    mask = response_mask_from(resp, eos_ids(model, tok))
    resp_clean = resp.masked_fill(mask == 0, tok.pad_token_id)
    texts = tok.batch_decode(resp_clean, skip_special_tokens=True)
    attn = torch.cat([enc["attention_mask"].repeat_interleave(n, 0), mask.long()], dim=1)
    logprobs = recorder.finish(out, out.shape[1] - plen) if recorder is not None else None
    return Rollout(out, attn, mask, plen, texts, logprobs)


def _shared_prompt_cache(model, enc: dict[str, torch.Tensor], n: int):
    """Each prompt's keys and values, but for its last token, run once and repeated for its `n` samples (generate
    would run every sample's copy): the cache `generate` continues from. None when nothing is shared or the
    model cannot take it."""
    ids, mask = enc["input_ids"], enc["attention_mask"]
    if ids.shape[1] < 2 or not bool(mask[:, :-1].any(-1).all()):
        return None  # a one-token prompt would leave a row with nothing to attend to
    out = _prompts_once(model, ids[:, :-1], mask[:, :-1], n)
    return None if out is None else out.past_key_values


def _prompts_once(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, n: int):
    """The model's output on one row per prompt (the LM head on the last position only), its cache repeated for
    the `n` rows of each prompt. None when there is nothing to share or the model cannot take a cache
    (gradient checkpointing, no `logits_to_keep`)."""
    if n <= 1 or not _keeps_logits(model) or getattr(model, "is_gradient_checkpointing", False):
        return None
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=position_ids(prompt_mask),
                use_cache=True, logits_to_keep=1)
    if out.past_key_values is None or not hasattr(out.past_key_values, "batch_repeat_interleave"):
        return None
    out.past_key_values.batch_repeat_interleave(n)
    return out


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, resp_len: int,
                   temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = True,
                   group: int = 1) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the last `resp_len` tokens, logits divided by temperature as in VERL.

    Only the positions that predict response tokens go through the LM head (`logits_to_keep`): with a 49k
    vocabulary the prompt's logits would be most of the pass's memory and a good part of its time.
    `group`: rows come in groups of that many samples of one prompt (GRPO's layout); the prompt then runs once
    per group (`_shared_prompt_logits`). `entropy_grad=False` computes the entropy for the metrics only, outside
    the graph (no entropy bonus: its vocabulary-wide product would otherwise be kept for, and differentiated in,
    the backward pass)."""
    logits = _shared_prompt_logits(model, input_ids, attention_mask, resp_len, group)
    if logits is None:
        kwargs = {"logits_to_keep": resp_len + 1} if _keeps_logits(model) else {}
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=position_ids(attention_mask), **kwargs).logits[:, -resp_len - 1:-1, :]
    logits = logits.float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, -resp_len:].unsqueeze(-1)).squeeze(-1)
    ent = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp, ent


def _shared_prompt_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, resp_len: int,
                          group: int) -> torch.Tensor | None:
    """The logits that predict the last `resp_len` tokens, each group's prompt run once: its keys and values are
    repeated for the group's rows, which then run their responses only (gradients flow back through the
    repeat). On SmolLM2 with 70-token prompts this cut a reference pass and an update by about a quarter, at
    the same log-probs (float32 rounding). None when the rows do not come in groups of one prompt, or the model
    cannot take a cache (gradient checkpointing, no `logits_to_keep`): the caller runs the plain pass."""
    rows, width = input_ids.shape
    plen = width - resp_len
    if group <= 1 or rows % group or plen < 1 or resp_len < 1:
        return None
    prompt_ids, prompt_mask = input_ids[::group, :plen], attention_mask[::group, :plen]
    if not (torch.equal(prompt_ids.repeat_interleave(group, 0), input_ids[:, :plen])
            and torch.equal(prompt_mask.repeat_interleave(group, 0), attention_mask[:, :plen])):
        return None
    out = _prompts_once(model, prompt_ids, prompt_mask, group)
    if out is None:
        return None
    first = out.logits[:, -1:, :].repeat_interleave(group, 0)  # the prompt's last position: response token 1
    if resp_len == 1:
        return first
    rest = model(input_ids=input_ids[:, plen:-1], attention_mask=attention_mask[:, :-1],
                 position_ids=position_ids(attention_mask)[:, plen:-1], past_key_values=out.past_key_values,
                 use_cache=True).logits
    return torch.cat([first, rest], dim=1)


def _keeps_logits(model) -> bool:
    """Whether the causal LM (under a PEFT wrapper or not) takes transformers' `logits_to_keep`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    denom = float(mask.sum())
    return float((x * mask).sum()) / denom if denom else float("nan")


def free_cores() -> int:
    """The cores other work leaves idle (this process's cores less the 1-minute load average), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, round(cores - os.getloadavg()[0])))


def set_threads(model: torch.nn.Module | None = None, small: int = 5_000_000) -> None:
    """Pick the CPU thread count: RLHF_TORCH_THREADS / OMP_NUM_THREADS when set, else 1 for tiny models and
    the idle cores (`free_cores`) for the others.

    Tiny models spend their time in thread hand-offs: on 2 busy shared cores one thread was
    4-30x faster per step than two. A real model (SmolLM2-135M) gains from a second thread only when the
    core is idle: at a load average of 20 on 2 cores, one thread ran its forward pass 2.5x and its
    generation 8x faster than two (OpenMP's threads wait for each other at every op).
    """
    n = os.environ.get("RLHF_TORCH_THREADS") or os.environ.get("OMP_NUM_THREADS")
    if n and n.isdigit() and int(n) > 0:
        torch.set_num_threads(int(n))
    elif model is not None and sum(p.numel() for p in model.parameters()) < small:
        torch.set_num_threads(1)
    elif model is not None:
        torch.set_num_threads(free_cores())
