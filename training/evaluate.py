"""On-demand validation win rate of one checkpoint.

`python -m training.evaluate --run-dir DIR --checkpoint DIR/checkpoints/global_step_N --out FILE`

Generates greedy responses of the checkpoint on the run's validation split, scores them and their
references with the job's reward (function, model or mix, user code only in the sandbox) and writes
FILE (JSON: win rate, Wilson 95% interval, count, per-source metrics, samples path). Samples go to
`<FILE's folder>/samples/val/<N>.jsonl` in the format of training-time validation.

It reuses the local backend's generation and scoring (training.generation, training.local.validation), so an
on-demand number and a training-time number at the same step are the same measurement.
Exit code 2: the request is wrong (the message says how); anything else is a crash.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from training import winrate
from training.checkpoints import step_of
from training.generation import GenerationError, checkpoint_format, load_generator
from training.jobspec import JobSpec, JobSpecError, read_spec
from training.local.config import HParams, JobError
from training.reward_client import RewardConfigError, RewardScorer
from training.rundir import RunDir, read_jsonl, write_json


class EvaluationError(ValueError):
    """A request the evaluator refuses; the message says why."""


def _hp(raw: dict[str, Any]) -> HParams:
    """The job's hp, typed by the schema, with the defaults for anything missing (the other backend's keys and
    blanks left out)."""
    try:
        return HParams(**{k: v for k, v in (raw or {}).items() if v is not None})
    except JobError as exc:
        raise EvaluationError(str(exc)) from None


def read_job(run_dir: Path) -> JobSpec:
    try:
        return read_spec(run_dir)
    except JobSpecError as exc:
        raise EvaluationError(str(exc)) from None


def _abs(run_dir: Path, value: Any, what: str) -> Path:
    if not value or not isinstance(value, str):
        raise EvaluationError(f"{what} is missing from job.json")
    p = Path(value)
    return p if p.is_absolute() else run_dir / p


def _greedy(gen, prompts: list[str], max_response_length: int) -> list[str]:
    return [g[0].text for g in gen.generate(prompts, max_response_length=max_response_length, temperature=0.0)]


def evaluate(run_dir: str | Path, checkpoint: str | Path, out: str | Path, *, max_rows: int | None = None,
             device: str | None = None, engine: str = "auto") -> dict[str, Any]:
    """Evaluate `checkpoint` of the run in `run_dir`; writes and returns the result dict."""
    run_dir, ckpt, out = Path(run_dir).resolve(), Path(checkpoint).resolve(), Path(out).resolve()
    job = read_job(run_dir)
    if job.kind == "reward_model":
        raise EvaluationError("a reward-model job has no responses to judge; its accuracy is in its metrics")
    if not job.reward.components:
        raise EvaluationError("this job has no reward to judge responses with (job.json reward.components is empty)")
    if not ckpt.is_dir():
        raise EvaluationError(f"checkpoint {ckpt} does not exist")
    try:
        step = step_of(ckpt)
    except ValueError as exc:
        raise EvaluationError(str(exc)) from None
    val_path = _abs(run_dir, job.data.val, "data.val")
    if not val_path.is_file():
        raise EvaluationError(f"validation data {val_path} does not exist")
    base_model = _abs(run_dir, job.model.path, "model.path")
    try:
        checkpoint_format(ckpt)  # refuse a folder that is no checkpoint before loading torch
    except GenerationError as exc:
        raise EvaluationError(str(exc)) from None
    hp = _hp(job.hp)
    # torch and transformers only now: a refused request answers fast
    from training.local.common import seed_everything
    from training.local.data import fit_prompts
    from training.local.data import read_jsonl as read_rows
    from training.local.validation import needs_base_references, reference_texts, validate_generation
    from training.models import resolve_device

    limit = max_rows
    seed_everything(hp.seed)
    dev = str(resolve_device(device or hp.device))
    dtype = hp.dtype if dev != "cpu" else "float32"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = read_rows(val_path)[:limit] if limit else read_rows(val_path)
    try:  # the one generation interface: vLLM on a GPU worker that has it, else transformers; greedy
        with load_generator(ckpt, engine=engine, device=dev, dtype=dtype, base_model=base_model) as policy:
            rows, prompts = fit_prompts(rows, policy.tok, hp.max_prompt_length, val_path.name)
            responses = _greedy(policy, prompts, hp.max_response_length)
        base_responses = None
        if needs_base_references(rows):  # no dataset reference: the base model's own reply is the reference
            with load_generator(base_model, engine=engine, device=dev, dtype=dtype) as base:
                base_responses = _greedy(base, prompts, hp.max_response_length)
    except GenerationError as exc:
        raise EvaluationError(str(exc)) from None
    references = reference_texts(rows, base_responses)
    with RewardScorer(job.reward.to_dict(), run_dir, sandbox=job.sandbox, device=dev,
                      workers=hp.reward_workers) as scorer:
        metrics = validate_generation(model=None, tok=None, rows=rows, prompts=prompts, scorer=scorer,
                                      references=references, step=step, max_response_length=hp.max_response_length,
                                      run_dir=out.parent, responses=responses)
    samples_path = RunDir(out.parent).samples("val", step)
    samples = read_jsonl(samples_path)
    summary = winrate.summarize(s.get("win") for s in samples)
    acc, acc_n = winrate.accuracy(samples)
    scores = [s["score"] for s in samples if isinstance(s.get("score"), (int, float))]
    result = {
        "step": step, "checkpoint": str(ckpt), "win_rate": summary.rate, "lo": summary.lo, "hi": summary.hi,
        "n": summary.n, "wins": summary.wins, "ties": summary.ties, "losses": summary.losses,
        "tie_rule": winrate.TIE_RULE, "accuracy": acc, "accuracy_n": acc_n,
        "rows": len(rows), "mean_reward": sum(scores) / len(scores) if scores else None,
        "reference": "dataset" if base_responses is None else "base model",
        "errors": sum(1 for s in samples if s.get("error")), "metrics": metrics, "samples_path": str(samples_path),
    }
    write_json(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Validation win rate of one checkpoint against the references.")
    ap.add_argument("--run-dir", required=True, help="the run directory (job.json, data/val.jsonl, reward/)")
    ap.add_argument("--checkpoint", required=True, help="a global_step_N folder (of this run or a parent run)")
    ap.add_argument("--out", required=True, help="where to write the result JSON")
    ap.add_argument("--max-rows", type=int, default=None, help="evaluate only the first N validation rows")
    ap.add_argument("--device", default=None, help="auto | cpu | cuda (default: the job's hp.device)")
    ap.add_argument("--engine", default="auto", help="auto (vLLM with CUDA, else transformers) | vllm | transformers")
    args = ap.parse_args(argv)
    try:
        result = evaluate(args.run_dir, args.checkpoint, args.out, max_rows=args.max_rows, device=args.device,
                          engine=args.engine)
    except (EvaluationError, JobError, RewardConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    rate = "n/a" if result["win_rate"] is None else (
        f"{result['win_rate']:.3f} [{result['lo']:.3f}, {result['hi']:.3f}] (ties count ½)")
    acc = "" if result["accuracy"] is None else f", accuracy {result['accuracy']:.3f}"
    print(f"step {result['step']}: wins {result['wins']}, ties {result['ties']}, losses {result['losses']} of "
          f"{result['n']} prompts ({result['reference']} references): win rate {rate}{acc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
