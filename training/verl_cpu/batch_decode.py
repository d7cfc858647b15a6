"""Token-in/token-out sampling of many requests in one batch, for the CPU rollout server (`rollout.py`).

VERL's agent loop sends every sample of a step to the server at once, one request each. Decoded one at a
time, a step of 16 samples x 64 tokens is 1,024 forward passes of one row; decoded together it is 64 passes
of 16 rows, which on CPU cost little more than one row each (the weights are read once per pass). Prompts
are left-padded (position ids count real tokens only), the prompt pass runs each distinct prompt once (a GRPO
group's samples share it) with the LM head on its last position only, and each request keeps its own stop: its
own EOS or its own token budget.

A request's tokens do not depend on the batch around it: a seeded request samples from its own generator
(as alone), and greedy requests take the arg-max; the log-probs agree with one-row decoding to float32
rounding.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Request:
    prompt_ids: list[int]
    max_tokens: int
    params: dict[str, Any] = field(default_factory=dict)


def filter_logits(logits: torch.Tensor, temperature: float, top_p: float | None,
                  top_k: int | None) -> torch.Tensor:
    """Temperature, then top-k, then nucleus filtering, as vLLM applies them."""
    scaled = logits / temperature
    if top_k is not None and top_k > 0:
        kth = torch.topk(scaled, min(top_k, scaled.size(-1))).values[:, -1, None]
        scaled = scaled.masked_fill(scaled < kth, -float("inf"))
    if top_p is not None and 0 < top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        drop = probs.cumsum(-1) - probs > top_p
        sorted_logits = sorted_logits.masked_fill(drop, -float("inf"))
        scaled = torch.full_like(scaled, -float("inf")).scatter(-1, order, sorted_logits)
    return scaled


def sampling_key(params: dict[str, Any]) -> tuple:
    """Requests with the same key can share a batch (same temperature and filters)."""
    return params.get("temperature", 1.0), params.get("top_p"), params.get("top_k")


def _keeps_logits(model: Any) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def _pick(logits: torch.Tensor, params: dict[str, Any],
          gens: list[torch.Generator | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of each row and the probabilities it was drawn from."""
    temperature = params.get("temperature", 1.0)
    if temperature is None or temperature <= 0:
        return torch.argmax(logits, dim=-1), torch.softmax(logits, dim=-1)
    probs = torch.softmax(filter_logits(logits, temperature, params.get("top_p"), params.get("top_k")), dim=-1)
    if all(g is None for g in gens):
        return torch.multinomial(probs, 1)[:, 0], probs
    return torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(gens)]), probs


def _prefill_each_prompt_once(model: Any, requests: list[Request], ids: torch.Tensor, mask: torch.Tensor,
                              positions: torch.Tensor) -> Any:
    """The prompt pass, run once per distinct prompt (a GRPO group's samples share theirs) and fanned out to every
    request: its last logits and its cache, row by row. Every row is padded to the same width, so a repeated
    prompt's row is the same tensor whichever request it came from."""
    extra = {"logits_to_keep": 1} if _keeps_logits(model) else {}
    row_of: dict[tuple[int, ...], int] = {}
    rows = torch.tensor([row_of.setdefault(tuple(r.prompt_ids), i) for i, r in enumerate(requests)])
    unique = torch.tensor(sorted(set(rows.tolist())))
    out = model(input_ids=ids[unique], attention_mask=mask[unique], position_ids=positions[unique], use_cache=True,
                **extra)
    if len(unique) < len(requests):
        fan_out = torch.searchsorted(unique, rows)  # each request's row among the distinct prompts
        out.past_key_values.reorder_cache(fan_out)
        out.logits = out.logits[fan_out]
    return out


@torch.no_grad()
def sample_batch(model: Any, requests: list[Request], vocab: int,
                 eos_ids: set[int]) -> list[tuple[list[int], list[float], str]]:
    """(tokens, log-probs, stop reason: "completed" at an EOS, else "length") for each request, decoded together
    with a KV cache. All requests must share `sampling_key`; ids at or past `vocab` (padded embedding rows) are
    never sampled."""
    params = requests[0].params
    b = len(requests)
    gens = [torch.Generator().manual_seed(int(r.params["seed"])) if r.params.get("seed") is not None else None
            for r in requests]
    width = max(len(r.prompt_ids) for r in requests)
    ids = torch.zeros(b, width, dtype=torch.long)
    mask = torch.zeros(b, width, dtype=torch.long)
    for i, r in enumerate(requests):
        ids[i, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids, dtype=torch.long)
        mask[i, width - len(r.prompt_ids):] = 1
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    out = _prefill_each_prompt_once(model, requests, ids, mask, positions)
    limits = [max(1, int(r.max_tokens)) for r in requests]
    tokens: list[list[int]] = [[] for _ in requests]
    logps: list[list[float]] = [[] for _ in requests]
    stops = ["length"] * b
    live = [True] * b
    last = positions[:, -1:]
    for _ in range(max(limits)):
        logits = out.logits[:, -1, :].float()
        logits[:, vocab:] = -float("inf")
        chosen, probs = _pick(logits, params, gens)
        chosen_lp = torch.log(probs.gather(1, chosen[:, None]).clamp_min(1e-30))[:, 0].tolist()
        picked = chosen.tolist()
        for i in range(b):
            if not live[i]:
                continue
            tokens[i].append(picked[i])
            logps[i].append(chosen_lp[i])
            if picked[i] in eos_ids:
                stops[i], live[i] = "completed", False
            elif len(tokens[i]) >= limits[i]:
                live[i] = False
        if not any(live):
            break
        mask = torch.cat([mask, torch.ones(b, 1, dtype=torch.long)], dim=1)
        last = last + 1
        out = model(input_ids=chosen[:, None], attention_mask=mask, position_ids=last,
                    past_key_values=out.past_key_values, use_cache=True)
    return [(t, lp, s) for t, lp, s in zip(tokens, logps, stops, strict=True)]
