"""The real-model task as a run directory: SmolLM2 on the GSM8K-format word problems, with VERL's gsm8k
scorer (and the format reward) as the reward, on the `smollm2-cpu` preset.

What the New job form launches for SmolLM2 and `gsm8k-synthetic`, written without the web app: used by the
benchmarks (bench/bench_real_model.py, bench/bench_real_learning.py) and the tests.

    python -m training.realtask --run-dir DIR --model SMOLLM2_DIR [--kind grpo|distill] [--backend local|verl]
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from training import wordproblems
from training.hparams import resolve_config
from training.jobspec import DataFiles, JobSpec, ModelRef, RewardBlock, RewardComponent
from training.reward_templates import get_template
from training.rundir import RunDir, write_atomic, write_jsonl

PRESET = "smollm2-cpu"
# name -> (file in reward/, reward template, the change made to it)
STRICT = ("gsm8k_strict.py", "gsm8k_verl", None)
FLEXIBLE = ("gsm8k_flexible.py", "gsm8k_verl", ('METHOD = "strict"', 'METHOD = "flexible"'))
FORMAT = ("gsm8k_format.py", "gsm8k_format", None)
REWARDS = {"strict": STRICT, "flexible": FLEXIBLE, "format": FORMAT}


def write_reward(run_dir: Path, which: str) -> str:
    """Write one of the starter rewards into the run's reward/ folder; its path relative to the run dir."""
    name, template, change = REWARDS[which]
    source = get_template(template)
    if change:
        source = source.replace(*change)
    write_atomic(RunDir(run_dir).reward_dir / name, source)
    return f"reward/{name}"


def write_real_run(run_dir: str | Path, model_dir: str | Path, *, kind: str = "grpo", backend: str = "local",
                   preset: str = PRESET, hp_overrides: dict[str, Any] | None = None,
                   verl_overrides: dict[str, Any] | None = None, teacher_dir: str | Path | None = None,
                   rewards: dict[str, float] | None = None, n_train: int = 2000, n_val: int = 200, seed: int = 0,
                   job_id: str = "real") -> Path:
    """Write job.json, data/ and reward/ for a SmolLM2 job; `rewards` maps strict/flexible/format to weights
    (default: strict 1.0). Settings go through the web app's own resolution (`resolve_config`), so a bad
    override fails here with the form's message."""
    run = RunDir(run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    train, val = wordproblems.generate(n_train, n_val, seed)
    write_jsonl(run.data("train"), train)
    if val:
        write_jsonl(run.data("val"), val)
    overrides = {**(hp_overrides or {}), **{f"verl.{k}": v for k, v in (verl_overrides or {}).items()}}
    context = {"has_reward": kind != "reward_model", "has_teacher": teacher_dir is not None}
    config, errors, _ = resolve_config(kind, preset, overrides, backend=backend, context=context)
    if errors:
        raise ValueError(f"settings refused: {errors}")
    components = tuple(RewardComponent(type="function", path=write_reward(run.path, name), name="compute_score",
                                       weight=float(weight))
                       for name, weight in (rewards or {"strict": 1.0}).items())
    JobSpec(
        job_id=job_id, kind=kind, backend=backend,
        model=ModelRef(path=str(Path(model_dir).resolve()), name=Path(model_dir).name),
        data=DataFiles(val="data/val.jsonl" if val else None),
        reward=RewardBlock(shaping="raw", components=components),
        hp=config["hp"], verl=config["verl"] if backend == "verl" else {},
        teacher=ModelRef(path=str(Path(teacher_dir).resolve())) if teacher_dir else None,
        sandbox={"time_limit_s": 5, "batch_time_limit_s": 120, "memory_mb": 1024},
    ).write(run.path)
    return run.path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a SmolLM2 word-problem run directory.")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--model", required=True, help="the converted SmolLM2 folder (python -m training.smollm2)")
    ap.add_argument("--kind", default="grpo", choices=("grpo", "distill"))
    ap.add_argument("--backend", default="local", choices=("local", "verl"))
    ap.add_argument("--teacher", help="the teacher folder (distillation)")
    ap.add_argument("--preset", default=PRESET)
    args = ap.parse_args(argv)
    print(write_real_run(args.run_dir, args.model, kind=args.kind, backend=args.backend, preset=args.preset,
                         teacher_dir=args.teacher))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
