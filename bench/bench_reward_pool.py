"""Parallel reward scoring: VERL's own GSM8K and math scorers, our sandbox pool vs VERL's serial manager.

    .venv/bin/python bench/bench_reward_pool.py [--n 2048] [--workers N] [--scorers gsm8k,math,...] [--check]

For each scorer, `--n` seeded, realistic responses (reasoning text of realistic lengths whose final
answer is right, right in another form, wrong or missing) are scored, in the same run, by:

(a) serial: VERL 0.9.1's NaiveRewardManager (`verl.workers.reward_manager.naive`), called the way the
    trainer calls it, on a DataProto of the batch: its own per-sample loop over `default_compute_score`.
    Its tokenizer is a stub whose decode() looks the response text up (one token per response), so
    the serial arm pays no real detokenisation: a conservative baseline. A bare in-process loop over
    `default_compute_score` is printed beside it;
(b) pool: `training.sandbox.SandboxPool` of `--workers` sandboxes (each a full sandbox: bubblewrap
    where available), `score_batch(items).scores`, the reward source being VERL's default_compute_score;
(c) process pool: `concurrent.futures.ProcessPoolExecutor(--workers)`, unsandboxed, `map()` with the
    same shard size as the pool (so it too pays one round trip per shard, not per sample); its workers
    are forked before this process imports VERL, so they are as lean as the sandboxes (fork, because
    VERL's prime_math times sympy out in a child started the worker's way, which spawn cannot pickle).

Every arm must give the same scores (checked). Times are the best of `--repeats` interleaved passes
(one pass, and no bare loop, for a workload whose serial pass takes over 10 s: prime_math); pools are
started (and VERL imported in them) before timing, as in training, where they live across steps;
start-up is printed separately.
Targets (2 cores): pool >= 1.8x serial and >= 0.9x the process pool, on all scorers together (their
summed time, which prime_math dominates: the other three take milliseconds a batch); `--check` exits 1
when a target is missed. `--n 256 --scorers gsm8k,math` is a quick run.

Scorers (VERL data_source -> module): gsm8k (openai/gsm8k -> gsm8k), math (lighteval/MATH ->
math_reward), math_dapo (math_dapo -> math_dapo), prime_math (numina_synthetic_math -> prime_math,
which compares answers with sympy in a child process with a timeout).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.sandbox import SandboxLimits, SandboxPool, isolation_info  # noqa: E402
from training.sandbox.pool import pool_size, shards  # noqa: E402

SOURCE = "from verl.utils.reward_score import default_compute_score as compute_score\n"
DATA_SOURCES = {"gsm8k": "openai/gsm8k", "math": "lighteval/MATH", "math_dapo": "math_dapo",
                "prime_math": "numina_synthetic_math"}
TARGET_SERIAL, TARGET_PROCESS_POOL = 1.8, 0.9
ONE_PASS_AFTER_S = 10.0

# -- realistic responses ------------------------------------------------------------------------------

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina"]
THINGS = ["clips", "apples", "pages", "dollars", "marbles", "cookies", "tickets", "books", "eggs", "miles"]
# (ground truth, an equivalent form a model might give) for the MATH-style scorers
MATH_ANSWERS = [("\\frac{1}{2}", "\\dfrac{1}{2}"), ("\\frac{3}{4}", "\\tfrac{3}{4}"), ("2\\sqrt{2}", "2 \\sqrt{2}"),
                ("12", "12.0"), ("-5", "-5"), ("\\pi", "\\pi"), ("(1,2)", "(1, 2)"), ("\\frac{\\sqrt{3}}{2}",
                "\\dfrac{\\sqrt{3}}{2}"), ("x^2+2x+1", "(x+1)^2"), ("3x-6", "3(x-2)"), ("\\frac{9}{4}", "2.25"),
                ("2\\sqrt{5}", "\\sqrt{20}"), ("45^\\circ", "45"), ("[0,1)", "[0, 1)")]


def _sentence(rng: random.Random) -> str:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op, val = rng.choice([("+", a + b), ("-", a - b), ("\\times", a * b)])
    who, what = rng.choice(NAMES), rng.choice(THINGS)
    return rng.choice([
        f"{who} has {a} {what} and gets {b} more, so we compute ${a} {op} {b} = {val}$.",
        f"First, note that ${a} {op} {b} = {val}$, which gives the number of {what}.",
        f"Let $x$ be the number of {what}; then $x = {a} {op} {b} = {val}$.",
        f"Substituting back, we get {val} {what} in total for {who}.",
        f"We can check this: ${val}$ is consistent with the {a} {what} from before.",
    ])


def _reasoning(rng: random.Random, lo: int, hi: int) -> str:
    target, out = rng.randint(lo, hi), []
    while sum(len(s) + 1 for s in out) < target:
        out.append(_sentence(rng))
    return " ".join(out)


def _gsm8k(rng: random.Random) -> tuple[str, str]:
    answer = rng.randint(1, 5000)
    body = _reasoning(rng, 200, 1200)
    kind = rng.random()
    if kind < 0.55:
        final = f"#### {answer:,}" if answer >= 1000 and rng.random() < 0.3 else f"#### {answer}"
    elif kind < 0.85:
        final = f"#### {answer + rng.choice([-10, -1, 1, 2, 100])}"
    else:
        final = f"So the answer is {answer}."  # no '####': VERL's strict GSM8K format scores 0
    return f"{body}\n{final}", str(answer)


def _math(rng: random.Random, style: str) -> tuple[str, str]:
    truth, other = rng.choice(MATH_ANSWERS)
    wrong, _ = rng.choice([p for p in MATH_ANSWERS if p[0] != truth])
    kind = rng.random()
    given = truth if kind < 0.45 else other if kind < 0.6 else wrong if kind < 0.9 else None
    body = _reasoning(rng, 400, 2500)
    if style == "prime_math":
        body = "Step 1: " + body[: len(body) // 2] + "\nStep 2: " + body[len(body) // 2:]
    if given is None:
        return f"{body}\nI could not finish the computation.", truth
    if style == "math_dapo" and rng.random() < 0.7:
        return f"{body}\nAnswer: {given}", truth
    return f"{body}\nTherefore, the final answer is $\\boxed{{{given}}}$.", truth


def make_items(scorer: str, n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(f"{scorer}-{seed}")
    items = []
    for i in range(n):
        solution, truth = _gsm8k(rng) if scorer == "gsm8k" else _math(rng, scorer)
        items.append({"data_source": DATA_SOURCES[scorer], "solution_str": solution, "ground_truth": truth,
                      "extra_info": {"index": i, "split": "train"}})
    return items


# -- the three arms -------------------------------------------------------------------------------------

class _StubTokenizer:
    """decode() of one token id = the response it stands for (prompts are id -1: empty)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        i = int(ids[0]) if len(ids) else -1
        return self.texts[i] if i >= 0 else ""


def naive_manager(items: list[dict]):
    """(manager, data): VERL's serial NaiveRewardManager and the DataProto it is called on."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.workers.reward_manager.naive import NaiveRewardManager

    n = len(items)
    data = DataProto.from_dict(
        tensors={"prompts": torch.full((n, 1), -1, dtype=torch.long),
                 "responses": torch.arange(n, dtype=torch.long).unsqueeze(1),
                 "attention_mask": torch.ones(n, 2, dtype=torch.long)},
        non_tensors={"data_source": np.array([it["data_source"] for it in items], dtype=object),
                     "reward_model": np.array([{"ground_truth": it["ground_truth"], "style": "rule"} for it in items],
                                              dtype=object),
                     "extra_info": np.array([dict(it["extra_info"]) for it in items], dtype=object)})
    manager = NaiveRewardManager(tokenizer=_StubTokenizer([it["solution_str"] for it in items]), num_examine=0)
    return manager, data


def serial_pass(manager, data) -> list[float]:
    return manager(data)[:, 0].tolist()  # one-token responses: each reward sits at position 0


def bare_pass(items: list[dict]) -> list[float]:
    from verl.utils.reward_score import default_compute_score

    return [_score(default_compute_score(it["data_source"], it["solution_str"], it["ground_truth"],
                                         it["extra_info"])) for it in items]


def _score(value) -> float:
    return float(value["score"] if isinstance(value, dict) else value)


def _warm() -> None:
    import verl.utils.reward_score  # noqa: F401 - imported once per worker, before timing


def _score_one(it: dict) -> float:
    from verl.utils.reward_score import default_compute_score

    return _score(default_compute_score(it["data_source"], it["solution_str"], it["ground_truth"], it["extra_info"]))


def process_pool_pass(executor: ProcessPoolExecutor, items: list[dict], workers: int) -> list[float]:
    size = shards(len(items), workers)[0][1] if items else 1
    return list(executor.map(_score_one, items, chunksize=size))


def pool_pass(pool: SandboxPool, items: list[dict]) -> list[float]:
    return pool.score_batch(items).scores


# -- the run -------------------------------------------------------------------------------------------------

def run(scorers: list[str], n: int, workers: int, repeats: int) -> dict[str, dict[str, float]]:
    t = time.perf_counter()
    limits = SandboxLimits(time_limit_s=30.0, batch_time_limit_s=3600.0)
    pool = SandboxPool(SOURCE, limits=limits, size=workers)
    pool.start()
    pool_start = time.perf_counter() - t
    t = time.perf_counter()
    # fork: VERL's timeout_limit (prime_math) starts a child per comparison with the worker's own start
    # method, and under spawn/forkserver it cannot pickle the function it wraps (every comparison fails).
    # The workers are forked before this process imports VERL (or builds any batch): lean, as the sandboxes.
    executor = ProcessPoolExecutor(workers, initializer=_warm, mp_context=multiprocessing.get_context("fork"))
    list(executor.map(_warm_probe, range(workers * 4)))
    pp_start = time.perf_counter() - t
    _warm()
    print(f"start-up (not timed below): sandbox pool {pool_start:.1f} s, process pool {pp_start:.1f} s "
          "(each imports VERL's scorers, which import torch)")
    results: dict[str, dict[str, float]] = {}
    try:
        for scorer in scorers:
            items = make_items(scorer, n)
            manager, data = naive_manager(items)
            warm = items[: 4 * workers]
            serial_pass(*naive_manager(warm)), pool_pass(pool, warm), process_pool_pass(executor, warm, workers)
            arms = {"serial (VERL NaiveRewardManager)": lambda m=manager, d=data: serial_pass(m, d),
                    "bare in-process loop": lambda it=items: bare_pass(it),
                    "sandbox pool": lambda it=items: pool_pass(pool, it),
                    "process pool (unsandboxed)": lambda it=items: process_pool_pass(executor, it, workers)}
            best = dict.fromkeys(arms, float("inf"))
            scores: dict[str, list[float]] = {}
            for k in range(repeats):
                for name, fn in arms.items():
                    heavy = best["serial (VERL NaiveRewardManager)"] > ONE_PASS_AFTER_S
                    if name == "bare in-process loop" and heavy:
                        best.pop(name, None)  # informational only: not worth minutes of a slow scorer
                        continue
                    t = time.perf_counter()
                    scores[name] = fn()
                    best[name] = min(best[name], time.perf_counter() - t)
                if k == 0 and best["serial (VERL NaiveRewardManager)"] > ONE_PASS_AFTER_S:
                    break
            ref = scores["serial (VERL NaiveRewardManager)"]
            for name, got in scores.items():
                if got != ref:
                    bad = next(i for i, (a, b) in enumerate(zip(got, ref, strict=True)) if a != b)
                    raise SystemExit(f"{scorer}: {name} disagrees with VERL's manager at sample {bad}: "
                                     f"{got[bad]} vs {ref[bad]} ({items[bad]['solution_str'][-80:]!r})")
            right = sum(1 for s in ref if s > 0) / len(ref)
            print(f"\n{scorer} ({DATA_SOURCES[scorer]}): {n} responses, {right:.0%} scored right, "
                  f"mean length {sum(len(it['solution_str']) for it in items) / n:.0f} chars")
            _print_arms(best)
            results[scorer] = best
    finally:
        pool.close()
        executor.shutdown()
    return results


def _warm_probe(_: int) -> int:
    return os.getpid()


def _print_arms(best: dict[str, float]) -> None:
    serial, pp, pool = (best["serial (VERL NaiveRewardManager)"], best["process pool (unsandboxed)"],
                        best["sandbox pool"])
    for name, sec in best.items():
        print(f"  {name + ':':36s} {sec * 1000:10.1f} ms")
    bare = best.get("bare in-process loop")
    print(f"  sandbox pool vs serial: {serial / pool:.2f}x   vs process pool: {pp / pool:.2f}x"
          + (f"   (vs the bare loop: {bare / pool:.2f}x)" if bare is not None else "   (bare loop not run: slow)"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048, help="responses per scorer")
    ap.add_argument("--workers", type=int, default=None, help="pool size (default: min(CPUs, 4))")
    ap.add_argument("--scorers", default=",".join(DATA_SOURCES), help="comma-separated: " + ", ".join(DATA_SOURCES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()
    scorers = [s.strip() for s in args.scorers.split(",") if s.strip()]
    unknown = [s for s in scorers if s not in DATA_SOURCES]
    if unknown:
        ap.error(f"unknown scorer(s) {', '.join(unknown)}; known: {', '.join(DATA_SOURCES)}")
    workers = pool_size(args.workers)
    print(f"isolation: {isolation_info()['mode']}; workers: {workers}; "
          f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    results = run(scorers, args.n, workers, max(1, args.repeats))
    arms = [a for a in next(iter(results.values())) if all(a in r for r in results.values())]
    total = {arm: sum(r[arm] for r in results.values()) for arm in arms}
    print(f"\nall scorers together ({len(results)} x {args.n} responses):")
    _print_arms(total)
    vs_serial = total["serial (VERL NaiveRewardManager)"] / total["sandbox pool"]
    vs_pp = total["process pool (unsandboxed)"] / total["sandbox pool"]
    ok = vs_serial >= TARGET_SERIAL and vs_pp >= TARGET_PROCESS_POOL
    print(f"targets: pool >= {TARGET_SERIAL}x serial: {vs_serial:.2f}x "
          f"{'OK' if vs_serial >= TARGET_SERIAL else 'MISSED'}; pool >= {TARGET_PROCESS_POOL}x process pool: "
          f"{vs_pp:.2f}x {'OK' if vs_pp >= TARGET_PROCESS_POOL else 'MISSED'}")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
