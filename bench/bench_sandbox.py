"""Reward sandbox throughput: exact-match reward over 10k samples, sandbox vs in-process, same run.

    .venv/bin/python bench/bench_sandbox.py [--samples 10000] [--batch 1000] [--repeats 3]

Prints samples/s for both, their ratio (target >= 0.25) and the fixed per-batch overhead, measured as
the median wall time of a batch of one sample (target < 100 ms). "In-process" is the bare loop a
reward manager would run: call compute_score by keyword for every sample and keep the float.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.sandbox import RewardSandbox, isolation_info  # noqa: E402

EXACT_MATCH = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0 if solution_str.strip() == ground_truth.strip() else 0.0
'''


def make_items(n: int, seed: int = 0) -> list[dict]:
    """GSM8K-sized rows: a ~300-character response, half of them correct."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        answer = str(rng.randint(0, 1000))
        body = "".join(rng.choices(string.ascii_letters + " ", k=300))
        solution = answer if i % 2 == 0 else body
        items.append({"data_source": "openai/gsm8k", "solution_str": solution, "ground_truth": answer,
                      "extra_info": {"index": i, "split": "train"}})
    return items


def load_in_process():
    ns: dict = {}
    exec(compile(EXACT_MATCH, "reward.py", "exec"), ns)  # noqa: S102 - our own benchmark reward
    return ns["compute_score"]


def in_process(items: list[dict], fn=load_in_process()) -> list[float]:
    return [float(fn(data_source=it["data_source"], solution_str=it["solution_str"],
                     ground_truth=it["ground_truth"], extra_info=it["extra_info"])) for it in items]


def one_pass(fn, items: list[dict], batch: int) -> tuple[float, float, list[float]]:
    """(samples/s, CPU seconds of this process per sample, scores) for one pass over `items`."""
    t, c = time.perf_counter(), time.process_time()
    scores: list[float] = []
    for k in range(0, len(items), batch):
        scores.extend(fn(items[k:k + batch]))
    return len(items) / (time.perf_counter() - t), (time.process_time() - c) / len(items), scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    items = make_items(args.samples)
    print(f"isolation: {isolation_info()['mode']}; load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    t = time.perf_counter()
    with RewardSandbox(EXACT_MATCH) as sb:
        print(f"sandbox start + load: {(time.perf_counter() - t) * 1000:.0f} ms")
        sb.score_batch(items[:args.batch])  # warm-up
        sb_rate = ip_rate = 0.0
        sb_cpu = ip_cpu = child_cpu = float("inf")
        for _ in range(args.repeats):  # interleaved, so that both see the same machine load
            child0 = sb.cpu_seconds
            rate, cpu, sb_scores = one_pass(lambda b: sb.score_batch(b).scores, items, args.batch)
            sb_rate, sb_cpu = max(sb_rate, rate), min(sb_cpu, cpu)
            child_cpu = min(child_cpu, (sb.cpu_seconds - child0) / args.samples)
            rate, cpu, ip_scores = one_pass(in_process, items, args.batch)
            ip_rate, ip_cpu = max(ip_rate, rate), min(ip_cpu, cpu)
            assert sb_scores == ip_scores, "the sandbox and the in-process call disagree"
        one = []
        for k in range(50):
            t = time.perf_counter()
            sb.score_batch(items[k:k + 1])
            one.append(time.perf_counter() - t)
    overhead_ms = statistics.median(one) * 1000
    ratio = sb_rate / ip_rate
    print(f"samples: {args.samples}, batch: {args.batch}, best of {args.repeats} interleaved passes")
    print(f"in-process: {ip_rate:12,.0f} samples/s   CPU {ip_cpu * 1e6:.2f} us/sample")
    print(f"sandbox:    {sb_rate:12,.0f} samples/s   CPU {sb_cpu * 1e6:.2f} us/sample here "
          f"+ {child_cpu * 1e6:.2f} us/sample in the sandbox process")
    print(f"ratio:      {ratio:.3f}  (target >= 0.25) {'OK' if ratio >= 0.25 else 'BELOW TARGET'}")
    print(f"CPU-cost ratio (load-independent): {ip_cpu / (sb_cpu + child_cpu):.3f}")
    print(f"per-batch overhead (batch of 1, median of 50): {overhead_ms:.2f} ms  (target < 100 ms) "
          f"{'OK' if overhead_ms < 100 else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
