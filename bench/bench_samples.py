"""The sample browser on a large rollout store: bounded reads vs loading every step.

    .venv/bin/python bench/bench_samples.py [--steps 200] [--prompts 128] [--group 8] [--chars 400]

Writes a synthetic store (rollout-store rows, per-token log-ratios included) and times, cold and warm:
the first page of one step (index + 20 lines), one prompt across steps (at most MAX_COLUMNS columns,
SCAN_BUDGET step files) and a group; the baseline reads every step's file whole (what a browser that
loads all steps would do). Peak memory of each is measured with tracemalloc.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_store(root: Path, steps: int, prompts: int, group: int, chars: int) -> int:
    rng = random.Random(0)
    folder = root / "samples" / "rollout"
    folder.mkdir(parents=True)
    total = 0
    for step in range(1, steps + 1):
        lines = []
        for p in rng.sample(range(prompts * 4), prompts):  # each step samples a batch of the prompt set
            for i in range(group):
                text = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(chars // 6))
                toks = text.split(" ")
                lines.append(json.dumps({
                    "input": f"prompt {p}: " + "x" * 100, "output": text, "gts": "1", "score": rng.random(),
                    "step": step, "uid": f"{step}:{p}", "sample_index": i,
                    "components": {"exact": rng.random(), "format": 1.0}, "errors": {}, "extras": {},
                    "advantage": rng.gauss(0, 1), "response_length": len(toks), "truncated": rng.random() < 0.1,
                    "tokens": toks, "token_logratio": [round(rng.gauss(0, 0.1), 4) for _ in toks]}))
        path = folder / f"{step}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        total += path.stat().st_size
    return total


def measure(fn, cold: bool):
    """(result, seconds, peak MB): timed without tracemalloc (it slows Python down), then run again under it;
    `cold` empties the index cache before each run."""
    from webapp.monitoring import samples as sel

    if cold:
        sel._cache.clear()
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    if cold:
        sel._cache.clear()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, dt, peak / 2**20


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--chars", type=int, default=400)
    args = ap.parse_args(argv)
    from training.ingest import read_samples
    from webapp.monitoring import samples as sel

    with tempfile.TemporaryDirectory() as tmp:
        run = str(Path(tmp))
        size = write_store(Path(tmp), args.steps, args.prompts, args.group, args.chars)
        print(f"store: {args.steps} steps × {args.prompts * args.group} rows, {size / 2**20:.0f} MB")
        last = args.steps
        for label in ("cold", "warm"):
            page, dt, mb = measure(lambda: sel.step_page(run, "rollout", last, sel.Filters(), 1), label == "cold")
            print(f"{label} step page ({len(page['rows'])} rows of {page['total']}): {dt * 1000:.0f} ms, "
                  f"peak {mb:.1f} MB")
        key = sel.step_index(run, "rollout", last).entries[0].prompt
        for label in ("cold", "warm"):
            across, dt, mb = measure(lambda: sel.prompt_columns(run, "rollout", key), label == "cold")
            print(f"{label} prompt across steps ({len(across['columns'])} columns, {across['scanned']} files read): "
                  f"{dt * 1000:.0f} ms, peak {mb:.1f} MB")
        uid = sel.step_index(run, "rollout", last).entries[0].uid
        _, dt, mb = measure(lambda: sel.group(run, "rollout", last, uid), False)
        print(f"group of {args.group}: {dt * 1000:.1f} ms, peak {mb:.1f} MB")
        _, dt, mb = measure(lambda: [read_samples(run, "rollout", s) for s in range(1, args.steps + 1)], False)
        print(f"baseline, every step held in memory: {dt * 1000:.0f} ms, peak {mb:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
