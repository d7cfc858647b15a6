"""Zero-signal prompts of a verifiable prompt set: a dry run before GRPO spends steps on them.

`python -m training.zero_signal --request FILE --out FILE [--progress FILE]`

Samples `group_size` responses per prompt (a GRPO group) from a model (an HF folder, LoRA adapter or
checkpoint, through `training.generation`) and scores them with a reward block (function components in the sandbox,
through `training.reward_client`, as training does). A prompt whose group of rewards ties (all right
or all wrong: `training.guard_builtins.tied_group_share`) has zero GRPO advantage, so a step learns nothing
from it; the result lists them, with the share, and the expected effective batch size. It also keeps the
first prompts' samples with their rewards, tied or not (`answers`: what the launch review shows).

The request (JSON):
    {"model": DIR, "base_model": DIR|null, "engine": "auto", "device": "auto",
     "prompts": JSONL (rows {"index", "prompt", "ground_truth", "data_source", "extra_info"}),
     "group_size": 4, "max_response_length": 64, "temperature": 1.0, "top_p": 1.0, "seed": 0, "batch_prompts": 16,
     "reward": {"components": [{"type": "function", "path": "reward.py", "name": "compute_score"}],
                "shaping": "raw"}, "sandbox": {limits}, "reward_workers": null, "batch_size": 64}
Relative paths are relative to the request file's folder. The progress file holds {"done", "total"}
(prompts), rewritten after each batch. Exit code 2: the request is wrong (the message says how).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from training.guard_builtins import TIED_TOL, tied_group_share
from training.reward_client import RewardConfigError, RewardRequest, RewardScorer
from training.rundir import read_jsonl, write_json

RIGHT_AT = 0.5  # a tied group counts as "all right" when its common reward is at least this, else "all wrong"
EXAMPLES = 20  # tied prompts shown with their sampled responses
ANSWERS = 3  # the first prompts' samples kept with their rewards, tied or not (what the launch review shows)


class DryRunError(ValueError):
    """A request the dry run refuses; the message says why."""


def _int(request: dict, key: str, default: int, low: int, high: int) -> int:
    value = request.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DryRunError(f"{key} must be a whole number from {low} to {high}, not {value!r}")
    return value


def _path(base: Path, value: Any, what: str) -> Path:
    if not value or not isinstance(value, str):
        raise DryRunError(f"{what} is missing from the request")
    p = Path(value)
    return p if p.is_absolute() else base / p


def prompt_text(prompt: Any) -> str:
    """What a reward sees as the prompt (a message list flattened)."""
    if isinstance(prompt, list):
        return "\n\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    return "" if prompt is None else str(prompt)


def group_verdict(rewards: list[float | None], tol: float = TIED_TOL) -> tuple[bool | None, float | None]:
    """(tied?, the common reward) of one prompt's samples; (None, None) with fewer than two usable rewards."""
    share = tied_group_share([rewards], tol)
    if share is None:
        return None, None
    usable = [float(r) for r in rewards if isinstance(r, (int, float))]
    return share == 1.0, (sum(usable) / len(usable) if share == 1.0 else None)


def summarize(groups: list[dict[str, Any]], group_size: int, tol: float = TIED_TOL) -> dict[str, Any]:
    """The share of tied prompts (the guard rules' definition), split into all right / all wrong."""
    share = tied_group_share([g["rewards"] for g in groups], tol)
    tied = [g for g in groups if g["tied"]]
    right = sum(1 for g in tied if g["value"] >= RIGHT_AT)
    return {"prompts": len(groups), "group_size": group_size,
            "counted": sum(1 for g in groups if g["tied"] is not None),
            "tied": len(tied), "tied_share": share, "all_right": right, "all_wrong": len(tied) - right,
            "right_at": RIGHT_AT, "tie_tolerance": tol,
            "uncounted": [g["index"] for g in groups if g["tied"] is None]}


def dry_run(request_path: str | Path, out: str | Path, progress: str | Path | None = None) -> dict[str, Any]:
    """Run the dry run described by the request file; write and return the result."""
    request_path, out = Path(request_path).resolve(), Path(out).resolve()
    base = request_path.parent
    try:
        request = json.loads(request_path.read_text())
    except (OSError, ValueError) as exc:
        raise DryRunError(f"cannot read the request {request_path}: {exc}") from None
    group_size = _int(request, "group_size", 4, 2, 64)
    max_response_length = _int(request, "max_response_length", 64, 1, 4096)
    batch_prompts = _int(request, "batch_prompts", 16, 1, 4096)
    seed = _int(request, "seed", 0, 0, 2**31 - 1)
    temperature, top_p = float(request.get("temperature", 1.0)), float(request.get("top_p", 1.0))
    if temperature <= 0:
        raise DryRunError("temperature must be above 0: greedy samples of a prompt are all the same")
    model = _path(base, request.get("model"), "model")
    base_model = _path(base, request["base_model"], "base_model") if request.get("base_model") else None
    rows = read_jsonl(_path(base, request.get("prompts"), "prompts"), strict=True)
    if not rows:
        raise DryRunError("the prompt file holds no rows")
    reward = dict(request.get("reward") or {})
    reward["components"] = [{**c, "path": str(_path(base, c.get("path"), "a reward component's path"))}
                            for c in reward.get("components") or []]
    from training.generation import GenerationError, load_generator  # torch only now: a bad request answers fast

    started = time.monotonic()
    groups: list[dict[str, Any]] = []
    samples: dict[int, list[str]] = {}
    answers: list[dict[str, Any]] = []
    if progress:
        write_json(progress, {"done": 0, "total": len(rows)})
    try:
        generator = load_generator(model, engine=request.get("engine", "auto"), device=request.get("device", "auto"),
                                   base_model=base_model, batch_size=int(request.get("batch_size", 64)))
    except GenerationError as exc:
        raise DryRunError(str(exc)) from None
    with generator, RewardScorer(reward, base, sandbox=request.get("sandbox"), device="cpu",
                                 workers=request.get("reward_workers")) as scorer:
        for start in range(0, len(rows), batch_prompts):
            batch = rows[start:start + batch_prompts]
            outs = generator.generate([r["prompt"] for r in batch], n=group_size,
                                      max_response_length=max_response_length, temperature=temperature, top_p=top_p,
                                      seed=seed + start)
            reqs = [RewardRequest(prompt=prompt_text(r["prompt"]), response=g.text, ground_truth=r.get("ground_truth"),
                                  data_source=r.get("data_source") or "default", extra_info=r.get("extra_info") or {})
                    for r, gens in zip(batch, outs, strict=True) for g in gens]
            results = scorer.score(reqs)  # prompt-major: prompt i's samples are group_size consecutive requests
            for i, (row, gens) in enumerate(zip(batch, outs, strict=True)):
                mine = results[i * group_size:(i + 1) * group_size]
                rewards = [None if r.error and all(c is None for c in r.components) else r.score
                           for r in mine]
                tied, value = group_verdict(rewards)
                groups.append({"index": row["index"], "rewards": rewards, "tied": tied, "value": value,
                               "errors": sum(1 for r in mine if r.error)})
                if tied and len(samples) < EXAMPLES:
                    samples[row["index"]] = [g.text for g in gens]
                if len(answers) < ANSWERS:
                    answers.append({"index": row["index"], "prompt": prompt_text(row["prompt"])[:500],
                                    "ground_truth": row.get("ground_truth"), "tied": tied,
                                    "responses": [{"text": g.text[:2000], "reward": reward}
                                                  for g, reward in zip(gens, rewards, strict=True)][:8]})
            if progress:
                write_json(progress, {"done": len(groups), "total": len(rows)})
        engine = generator.engine
    summary = summarize(groups, group_size)
    prompts_by_index = {r["index"]: r for r in rows}
    result = {**summary, "engine": engine, "seconds": round(time.monotonic() - started, 2),
              "params": {"group_size": group_size, "max_response_length": max_response_length,
                         "temperature": temperature, "top_p": top_p, "seed": seed},
              "groups": groups,
              "examples": [{"index": i, "prompt": prompt_text(prompts_by_index[i]["prompt"])[:500],
                            "ground_truth": prompts_by_index[i].get("ground_truth"), "responses": texts[:8]}
                           for i, texts in samples.items()],
              "answers": answers}
    write_json(out, result, indent=None)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Which prompts give GRPO no signal: sample, score, count ties.")
    ap.add_argument("--request", required=True, help="the request JSON (see the module notes)")
    ap.add_argument("--out", required=True, help="where to write the result JSON")
    ap.add_argument("--progress", default=None, help="a JSON file rewritten with {done, total} after each batch")
    args = ap.parse_args(argv)
    try:
        result = dry_run(args.request, args.out, args.progress)
    except (DryRunError, RewardConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    share = "n/a" if result["tied_share"] is None else f"{result['tied_share']:.1%}"
    print(f"{result['tied']} of {result['counted']} prompts tie ({share}): {result['all_right']} all right, "
          f"{result['all_wrong']} all wrong ({result['group_size']} samples each, {result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
