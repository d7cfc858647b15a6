"""A launch's length pre-flight (training/length_preflight.py) on its chosen rows with the base model's own
tokenizer and chat template; the token counts are cached per (rows, model), so the live preview re-checks
only the limits. Shown on the launch review, stored in the job's data manifest for the run page."""
from __future__ import annotations

import bisect
import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from training import length_preflight as lp
from webapp.registry.models import ModelEntry
from webapp.runs.services.data import Pinned

_CACHE: OrderedDict[tuple, tuple[list[int], str]] = OrderedDict()
_CACHE_SIZE = 16
BINS = 30


def _key(prompts: list, model: ModelEntry) -> tuple:
    """The counted prompts themselves (hashing is far cheaper than tokenising) and the model's folder."""
    digest = hashlib.sha1(json.dumps(prompts, sort_keys=True, default=str).encode()).hexdigest()
    try:
        stamp = Path(model.path, "config.json").stat().st_mtime if model.path else 0.0
    except OSError:
        stamp = 0.0
    return digest, model.location, stamp


def _lengths(pinned: Pinned, model: ModelEntry, tokenizer) -> tuple[list[int], str]:
    prompts = [pinned.rows[i].get("prompt") for i in lp.sample_indices(len(pinned.rows))]
    key = _key(prompts, model)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    if tokenizer is not None:
        found = (lp.prompt_lengths(prompts, tokenizer), "tokens")
    else:
        found = (lp.char_lengths(prompts), "characters")
    _CACHE[key] = found
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return found


def histogram(lengths: list[int], limit: int, bins: int = BINS) -> dict[str, list[int]]:
    """About `bins` equal-width bins from 0 past the longest prompt, with the limit on an edge (the bin
    below it may be narrower), so a bar is wholly kept or wholly left out: counts[i] counts the lengths in
    (edges[i], edges[i+1]] (the first bin takes 0 too)."""
    top = max([limit, *lengths])
    width = max(1, -(-top // bins))
    edges = [*range(0, limit, width), limit]
    while edges[-1] < top:
        edges.append(edges[-1] + width)
    counts = [0] * (len(edges) - 1)
    for v in lengths:
        counts[max(0, bisect.bisect_left(edges, v) - 1)] += 1
    return {"edges": edges, "counts": counts}


def length_preflight(*, pinned: Pinned | None, model: ModelEntry | None, limits: dict[str, int], tokenizer,
                     context: int | None = None) -> dict[str, Any] | None:
    """The pre-flight summary (training.length_preflight.summarize) with its histogram; None without rows
    (a rollback reuses its parent's rows, and its parent's pre-flight). `limits`: see lp.summarize."""
    if pinned is None or not pinned.rows or model is None:
        return None
    lengths, unit = _lengths(pinned, model, tokenizer)
    summary = lp.summarize(lengths, n_rows=len(pinned.rows), limits=limits, unit=unit, context=context)
    summary["histogram"] = histogram(lengths, summary["max_prompt_length"])
    summary["tokenizer"] = model.name if unit == "tokens" else ""
    return summary


def figure(summary: dict[str, Any]) -> dict[str, Any]:
    """A Plotly figure of the prompt lengths, the bars past the limit in red and the limit drawn."""
    hist, limit, unit = summary["histogram"], summary["max_prompt_length"], summary["unit"]
    edges, counts = hist["edges"], hist["counts"]
    centers = [(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)]
    widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
    colors = ["#b42318" if a >= limit else "#2457d6" for a in edges[:-1]]
    sample = f" (a sample of {summary['counted']:,})" if summary["sampled"] else ""
    return {
        "data": [{"type": "bar", "x": centers, "y": counts, "width": widths, "marker": {"color": colors},
                  "name": "prompts", "hovertemplate": "%{x} " + unit + ": %{y} prompts<extra></extra>"}],
        "layout": {"height": 260, "margin": {"l": 50, "r": 20, "t": 40, "b": 45}, "bargap": 0.05, "showlegend": False,
                   "title": {"text": f"Prompt length ({unit}){sample}"},
                   "xaxis": {"title": {"text": unit}, "rangemode": "tozero"},
                   "yaxis": {"title": {"text": "prompts"}, "rangemode": "tozero", "tickformat": ",d"},
                   "shapes": [{"type": "line", "x0": limit, "x1": limit, "yref": "paper", "y0": 0, "y1": 1,
                               "line": {"color": "#b42318", "dash": "dash", "width": 2}}],
                   "annotations": [{"x": limit, "yref": "paper", "y": 1, "text": f"max prompt length {limit}",
                                    "showarrow": False, "xanchor": "right", "yanchor": "bottom",
                                    "font": {"color": "#b42318"}}]},
    }


def lengths_text(summary: dict[str, Any], width: int = 40) -> str:
    """The pre-flight for a terminal (`launch_job --dry-run`): the figures, then the histogram's bars."""
    s, unit = summary, summary["unit"]
    how = f"{s['tokenizer']}'s tokenizer and chat template" if unit == "tokens" else "characters: no local tokenizer"
    sample = f", a sample of {s['counted']:,}" if s["sampled"] else ""
    lines = [f"# length pre-flight ({how}{sample})",
             f"# prompts: median {s['median']}, p95 {s['p95']}, longest {s['max']} {unit}; "
             f"{s['over']:,} of {s['rows']:,} ({100 * s['share']:.1f}%) longer than max_prompt_length "
             f"{s['max_prompt_length']} (left out of training)",
             f"# responses: up to {s['max_response_length']} tokens; the longest kept prompt with a full response is "
             f"{s['longest_sequence']} of max_seq_len {s['max_seq_len']}"
             + (f" (model context {s['context']})" if s["context"] else "")]
    edges, counts = s["histogram"]["edges"], s["histogram"]["counts"]
    most = max(counts) or 1
    for a, b, n in zip(edges, edges[1:], counts, strict=False):
        if n:
            mark = " > max" if a >= s["max_prompt_length"] else ""
            lines.append(f"#   {a:>6}-{b:<6} {n:>7,} {'#' * max(1, round(width * n / most))}{mark}")
    return "\n".join(lines)
