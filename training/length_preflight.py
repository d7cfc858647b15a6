"""Length pre-flight (no Django): how a job's prompts fit `max_prompt_length` and its sequences
`max_seq_len`, counted with the model's own tokenizer and chat template the way each backend renders them.

Both backends leave a prompt longer than `max_prompt_length` out of training (VERL's
`data.filter_overlong_prompts`; the local trainers do the same, `training/local/data.fit_prompts`), so a
too-long row is never trained on; a response stops at `max_response_length`, and the share that does is the
run's `response_length/clip_ratio` metric.

`prompt_lengths` is the expensive part (it tokenises); `summarize` and `check` are cheap and run again for
every change of the limits.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SAMPLE = 20_000  # rows tokenised at most: beyond this an evenly spaced sample stands for the rest
CLIP_METRIC = "response_length/clip_ratio"
LENGTH_SETTINGS = ("max_prompt_length", "max_response_length", "max_seq_len")  # what the pre-flight checks against


def sample_indices(n_rows: int, limit: int = SAMPLE) -> list[int]:
    """Every row up to `limit`, else `limit` evenly spaced rows (deterministic: the same rows each time)."""
    if n_rows <= limit:
        return list(range(n_rows))
    return sorted({int(i * n_rows / limit) for i in range(limit)})


def prompt_lengths(prompts: Sequence[Any], tokenizer) -> list[int]:
    """Each prompt's length in tokens as both backends count it: rendered through the model's chat template
    (training/local/data.render_prompt, VERL's way) and tokenised without special tokens, in one batch."""
    from training.local.data import render_prompt

    if not prompts:
        return []
    texts = [render_prompt(p, tokenizer) for p in prompts]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def char_lengths(prompts: Sequence[Any]) -> list[int]:
    """Without a local tokenizer (a hub id): characters, an upper bound of the token count."""
    out = []
    for p in prompts:
        if isinstance(p, list):
            out.append(sum(len(str(m.get("content", ""))) if isinstance(m, dict) else len(str(m)) for m in p))
        else:
            out.append(len("" if p is None else str(p)))
    return out


def _percentile(sorted_values: list[int], q: float) -> int:
    if not sorted_values:
        return 0
    return sorted_values[min(len(sorted_values) - 1, int(q * (len(sorted_values) - 1) + 0.5))]


def summarize(lengths: Sequence[int], *, n_rows: int, limits: dict[str, int], unit: str = "tokens",
              context: int | None = None) -> dict[str, Any]:
    """The figures the launch review shows: how many prompts are too long (scaled from the sample to all
    `n_rows`), the distribution, and the response budget against `max_seq_len` and the model's context.
    `limits`: the LENGTH_SETTINGS' values (only those: the pre-flight never sees the other settings)."""
    values = sorted(int(v) for v in lengths)
    limit, response, seq = (int(limits[k]) for k in LENGTH_SETTINGS)
    counted = len(values)
    over = sum(1 for v in values if v > limit)
    share = over / counted if counted else 0.0
    kept = [v for v in values if v <= limit]
    longest_kept = kept[-1] if kept else 0
    return {
        "rows": n_rows, "counted": counted, "sampled": counted < n_rows, "unit": unit,
        "over": round(share * n_rows) if counted < n_rows else over, "share": share, "all_over": counted > 0 and
        over == counted, "min": values[0] if values else 0, "median": _percentile(values, 0.5),
        "p95": _percentile(values, 0.95), "max": values[-1] if values else 0,
        "max_prompt_length": limit, "max_response_length": response, "max_seq_len": seq, "context": context,
        # the longest sequence a kept prompt can reach, and the room left for its response
        "longest_sequence": longest_kept + response, "response_room": min(response, seq - longest_kept),
    }


def check(summary: dict[str, Any] | None, warn_share: float, errors: dict[str, str],
          warnings: dict[str, str]) -> None:
    """Refuse a launch in which every prompt is too long; warn above `warn_share`, and when a kept prompt
    plus a full response cannot fit the model's context (max_seq_len itself is checked by resolve_config).
    Counted in characters (no local tokenizer), only warn."""
    if not summary or not summary["counted"] or "max_prompt_length" in errors:
        return
    s = summary
    limit, unit = s["max_prompt_length"], s["unit"]
    if s["all_over"] and unit == "tokens":
        errors["max_prompt_length"] = (
            f"Every prompt is longer than the max prompt length {limit} (the shortest is {s['min']} {unit}): "
            f"nothing would be trained on. Raise it to at least {s['min']}, or choose other data.")
        return
    if s["over"] and s["share"] > warn_share:
        keep_all = f" Raise it to {s['max']} to keep them all." if s["max"] <= s["max_seq_len"] else ""
        about = "about " if s["sampled"] else ""
        counted = " (counted in characters: no local tokenizer)" if unit != "tokens" else ""
        warnings["max_prompt_length"] = (
            f"{about}{s['over']:,} of {s['rows']:,} prompts ({s['share']:.1%}) are longer than the max prompt "
            f"length {limit} {unit}{counted}: both backends leave them out of training.{keep_all}")
    if unit == "tokens" and s["context"] and s["longest_sequence"] > s["context"]:
        warnings["max_seq_len"] = (
            f"The longest kept prompt plus a full response is {s['longest_sequence']} tokens, more than the "
            f"model's context of {s['context']}.")
