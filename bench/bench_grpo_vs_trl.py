"""Seconds per GRPO step: the local backend vs TRL's GRPOTrainer, same model, batch and group size.

    .venv/bin/python bench/bench_grpo_vs_trl.py [--steps 30] [--prompts 16] [--group 8] [--threads 1]

Both train the demo model (training/demo.py) on the demo addition task with exact-match reward,
`max_new_tokens` = the demo preset's max_response_length, KL coefficient 0.02, one update per
batch, in this one process. The first `--warmup` steps of each are not timed. The local
backend scores through training.sandbox when it is installed (its production path); TRL calls
the same reward function in-process.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")


def exact_match(completions, ground_truth, **_kw) -> list[float]:
    return [1.0 if str(c).strip() == str(g) else 0.0 for c, g in zip(completions, ground_truth, strict=True)]


def bench_local(model_dir: Path, work: Path, args) -> list[float]:
    from training import demo
    from training.local.train import run_job

    run = demo.write_demo_run(work / "local", "grpo", model_dir, hp_overrides={
        "batch_size": args.prompts, "group_size": args.group, "max_steps": args.steps + args.warmup,
        "test_freq": 0, "save_freq": 0, "lr": args.lr, "kl_coef": args.kl})
    run_job(run, run / "metrics.jsonl")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["data"]["timing_s/step"] for r in rows if r["step"] > args.warmup]


def bench_trl(model_dir: Path, work: Path, args) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from training import demo
    from training.models import load_tokenizer

    tok = load_tokenizer(model_dir)
    rows = demo.arithmetic_rows("train") * 4
    data = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["ground_truth"]} for r in rows])
    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    cfg = GRPOConfig(
        output_dir=str(work / "trl"), per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group, max_completion_length=demo.DEMO_CPU_PRESETS["grpo"]["max_response_length"],
        beta=args.kl, learning_rate=args.lr, max_steps=args.steps + args.warmup, temperature=1.0,
        use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=10_000,
        seed=1, disable_tqdm=True,
    )
    # The model goes in as a saved path: with beta > 0 TRL rebuilds the reference from it.
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=exact_match, args=cfg, train_dataset=data,
                          processing_class=tok, callbacks=[StepTimer()])
    trainer.train()
    return times[args.warmup:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per trainer")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="responses per prompt")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--kl", type=float, default=0.02)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads for both")
    args = ap.parse_args()

    import torch

    from training import demo

    torch.set_num_threads(args.threads)
    os.environ["RLHF_TORCH_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = demo.build_demo_model(work / "demo-tiny")
        local = bench_local(model_dir, work, args)
        trl = bench_trl(model_dir, work, args)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    def median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    print(f"\nGRPO step, {args.prompts} prompts x {args.group} samples, tiny Qwen2 ({args.threads} thread(s)), "
          f"{args.steps} timed steps after {args.warmup} warm-up:")
    # On shared cores the fastest step is the least disturbed estimate; mean and median follow the load.
    print(f"  local backend  : mean {mean(local):.4f}  median {median(local):.4f}  min {min(local):.4f} s/step")
    print(f"  TRL GRPOTrainer: mean {mean(trl):.4f}  median {median(trl):.4f}  min {min(trl):.4f} s/step")
    print(f"  ratio TRL/local: mean {mean(trl) / mean(local):.2f}x  median {median(trl) / median(local):.2f}x  "
          f"min {min(trl) / min(local):.2f}x")


if __name__ == "__main__":
    main()
