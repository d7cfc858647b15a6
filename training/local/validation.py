"""Generation validation: greedy policy responses scored by the job's RewardScorer, per-source
mean reward, win rate against a reference (the row's `reference`, else the base model's reply) with
its wins / ties / losses, and accuracy against the ground truth (`training.winrate.validation_metrics`).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training import winrate
from training.generation_hf import TransformersGenerator
from training.reward_client import RewardRequest, RewardScorer
from training.rundir import RunDir, write_jsonl


def greedy_responses(model, tok, prompts: list[str], max_response_length: int, chunk: int = 64,
                     autocast: Callable | None = None) -> list[str]:
    """Greedy replies of a loaded model, through the one generation interface (training.generation)."""
    gen = TransformersGenerator(model, tok, batch_size=chunk, autocast=autocast)
    return [g[0].text for g in gen.generate(prompts, max_response_length=max_response_length, temperature=0.0)]


def requests_for(rows: list[dict], prompts: list[str], responses: list[str]) -> list[RewardRequest]:
    return [RewardRequest(prompt=p, response=r, ground_truth=row.get("ground_truth"),
                          data_source=str(row.get("data_source") or "default"), extra_info=row.get("extra_info") or {})
            for row, p, r in zip(rows, prompts, responses, strict=True)]


def reference_texts(rows: list[dict], base_responses: list[str] | None) -> list[str | None]:
    """The row's own reference when it has one, else the base model's greedy response."""
    refs: list[str | None] = []
    for i, row in enumerate(rows):
        ref = row.get("reference")
        if ref is None and "chosen" in row and isinstance(row["chosen"], str):
            ref = row["chosen"]
        refs.append(ref if ref is not None else (base_responses[i] if base_responses else None))
    return refs


def needs_base_references(rows: list[dict]) -> bool:
    return any(r.get("reference") is None and not isinstance(r.get("chosen"), str) for r in rows)


def validate_generation(*, model, tok, rows: list[dict], prompts: list[str], scorer: RewardScorer,
                        references: list[str | None], step: int, max_response_length: int, run_dir: Path,
                        tie_tolerance: float = 1e-6, autocast: Callable | None = None,
                        responses: list[str] | None = None) -> dict[str, float]:
    """Return the val metrics for `step` and write samples/val/<step>.jsonl.

    `responses` already generated (training.evaluate generates through training.generation) skip the model."""
    if responses is None:
        responses = greedy_responses(model, tok, prompts, max_response_length, autocast=autocast)
    results = scorer.score(requests_for(rows, prompts, responses))
    ref_idx = [i for i, r in enumerate(references) if r is not None]
    ref_results: dict[int, Any] = {}
    if ref_idx:
        scored = scorer.score(requests_for([rows[i] for i in ref_idx], [prompts[i] for i in ref_idx],
                                           [references[i] for i in ref_idx]))  # type: ignore[misc]
        ref_results = dict(zip(ref_idx, scored, strict=True))
    by_source: dict[str, dict[str, list]] = defaultdict(lambda: {"score": [], "ref": []})
    samples = []
    for i, (row, res) in enumerate(zip(rows, results, strict=True)):
        ds = str(row.get("data_source") or "default")
        ref_res = ref_results.get(i)
        win = winrate.outcome(res.score, ref_res.score if ref_res else None, tie_tolerance)
        by_source[ds]["score"].append(res.score)
        if ref_res is not None:
            by_source[ds]["ref"].append(ref_res.score)
        samples.append({"input": prompts[i], "output": responses[i], "gts": row.get("ground_truth"),
                        "score": res.score, "step": step, "reference": references[i],
                        "reference_score": ref_res.score if ref_res else None, "win": win,
                        "data_source": ds, "error": res.error})
    metrics: dict[str, float] = {}
    for ds, vals in by_source.items():
        metrics[f"val-core/{ds}/reward/mean@1"] = sum(vals["score"]) / len(vals["score"])
        if vals["ref"]:
            metrics[f"val-aux/{ds}/reference_reward/mean@1"] = sum(vals["ref"]) / len(vals["ref"])
        metrics[winrate.metric_names(ds)["n"]] = 0  # replaced below when any pair was judged
    # win rate (ties ½) with its interval, wins / ties / losses and accuracy: the same rule as VERL's at ingest
    metrics.update(winrate.validation_metrics(samples))
    write_jsonl(RunDir(run_dir).samples("val", step), samples)
    return metrics

