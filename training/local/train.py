"""Entry point: `python -m training.local.train --run-dir DIR`.

Reads DIR/job.json and its data, writes metrics to $VERL_FILE_LOGGER_PATH (else
DIR/metrics.jsonl) and checkpoints to DIR/checkpoints. Exit code 2 means the job itself is
wrong (the message says how); anything else is a crash.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from training.diagnostics import register_faulthandler
from training.local.common import MetricsLogger, seed_everything, set_threads
from training.local.config import Job, JobError, load_job
from training.reward_client import RewardConfigError, RewardScorer
from training.sandbox import SandboxUnavailable


def make_scorer(job: Job, device: str) -> RewardScorer | None:
    """The job's reward scorer (None without reward components); enter it before scoring."""
    if not job.reward or not job.reward.get("components"):
        return None
    return RewardScorer(job.reward, job.run_dir, sandbox=job.sandbox, device=device, workers=job.hp.reward_workers)


def run_job(run_dir: str | Path, metrics_path: str | Path | None = None) -> int:
    """Run the job in `run_dir` to completion; returns the last step trained."""
    # Nothing here may reach a model hub; also keeps HF progress bars out of log.txt.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    from training.local.loop import run_loop
    from training.models import resolve_device

    hf_logging.disable_progress_bar()
    job = load_job(run_dir)
    seed_everything(job.hp.seed)
    logger = MetricsLogger(metrics_path or os.environ.get("VERL_FILE_LOGGER_PATH") or job.run_dir / "metrics.jsonl")
    device = str(resolve_device(job.hp.device))  # where the reward models score, as the trainer's Runtime resolves it
    scorer = make_scorer(job, device)
    if scorer is not None:
        scorer.__enter__()
    try:
        if job.kind == "grpo":
            from training.local.grpo import GRPOTrainer

            algo = GRPOTrainer(job, scorer)  # type: ignore[arg-type]
        elif job.kind == "distill":
            from training.local.distill import DistillTrainer

            algo = DistillTrainer(job, scorer)
        else:
            from training.local.reward_model import RewardModelTrainer

            algo = RewardModelTrainer(job)
        set_threads(algo.model)
        try:
            return run_loop(job, algo, len(algo.rows), logger)
        finally:
            algo.close()
    finally:
        if scorer is not None:
            scorer.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run a local training job from a run directory.")
    ap.add_argument("--run-dir", required=True, help="folder with job.json (see docs/run-directory.md)")
    args = ap.parse_args(argv)
    register_faulthandler()  # a stack dump on SIGUSR2 when a stall is detected and py-spy is missing
    try:
        run_job(args.run_dir)
    except (JobError, RewardConfigError, SandboxUnavailable, FileNotFoundError) as exc:  # said in one line
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
