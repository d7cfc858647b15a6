"""VERL's step time on one node and on two: the same CPU rehearsal on a real two-node Ray cluster.

    .venv/bin/python bench/bench_verl_nodes.py [--steps 6]

Starts a Ray head and a second node on 127.0.0.1 (tests/ray_cluster_support.py: `ray start`, loopback
only, its own token, stopped at the end), then runs VERL's real `python -m verl.trainer.main_ppo`
(GRPO, the demo model, the CPU plugin, batch 4, group 2) through the app's backend and supervisor, one
after the other in the same run of this script:
  private  the usual CPU rehearsal: the attempt's own Ray cluster (no RAY_ADDRESS), the baseline;
  1 node   `ray job submit` to the cluster with nnodes=1 (one data-parallel worker);
  2 nodes  the same with nnodes=2 (one data-parallel worker on each node, gloo between them).
The step time is VERL's own `timing_s/step`, averaged over steps 2..N (step 1 carries start-up); the
wall time of each launch (submission, Ray start-up, the run) is printed too.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPEC = {
    "job_id": "bench", "kind": "grpo", "backend": "verl",
    "model": {"path": "MODEL", "name": "demo-tiny"},
    "data": {"train": "data/train.jsonl", "val": "data/val.jsonl"},
    "reward": {"shaping": "raw", "components": [
        {"type": "function", "path": "reward/near_miss.py", "name": "compute_score", "weight": 1.0}]},
    "hp": {"device": "cpu", "lr": 1e-3, "kl_coef": 0.02, "batch_size": 4, "group_size": 2, "epochs": 100,
           "max_steps": 6, "save_freq": 0, "test_freq": 0, "seed": 1},
    "verl": {"rollout_engine": "hf", "strategy": "fsdp2", "nnodes": 1},
    "sandbox": {"time_limit_s": 5, "batch_time_limit_s": 120, "memory_mb": 1024},
}


RUNS = (("private", 1, False), ("1-node", 1, True), ("2-nodes", 2, True))


def support_module():
    """tests/ray_cluster_support.py, by its path (a `tests` package installed by a dependency can shadow ours)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ray_cluster_support", ROOT / "tests" / "ray_cluster_support.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_run(base: Path, name: str, model: Path, steps: int, nnodes: int) -> tuple[dict, Path]:
    from training.demo import NEAR_MISS_SOURCE, arithmetic_rows

    run_dir = base / name
    (run_dir / "data").mkdir(parents=True)
    (run_dir / "reward").mkdir()
    (run_dir / "reward" / "near_miss.py").write_text(NEAR_MISS_SOURCE)
    for split, rows in (("train", arithmetic_rows("train")), ("val", arithmetic_rows("val")[:6])):
        (run_dir / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = copy.deepcopy(SPEC)
    spec["job_id"] = f"bench-{name}"
    spec["model"]["path"] = str(model)
    spec["hp"]["max_steps"], spec["verl"]["nnodes"] = steps, nnodes
    (run_dir / "job.json").write_text(json.dumps(spec, indent=1))
    return spec, run_dir


def run_attempt(spec: dict, run_dir: Path) -> tuple[Path, float]:
    """prepare + supervise, as the app's launch does; returns (attempt dir, wall seconds)."""
    from training.backends.verl import VerlBackend
    from training.rundir import RunDir, write_json
    from training.supervisor import supervise

    plan = VerlBackend().prepare(run_dir, 1)
    adir = RunDir(run_dir).attempt(1).create()
    write_json(adir.launch, plan.to_json())
    t0 = time.time()
    rc = supervise(adir.path)
    wall = time.time() - t0
    if rc != 0:
        raise SystemExit(f"{run_dir.name}: the run failed ({rc}); see {adir.log}")
    return adir.path, wall


def step_times(metrics: Path) -> list[float]:
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r["data"]["timing_s/step"] for r in rows if r["step"] >= 2 and "timing_s/step" in r["data"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--only", nargs="+", choices=[name for name, _, _ in RUNS], help="run only these launches")
    args = ap.parse_args(argv)

    import torch

    from training.demo import build_demo_model

    LoopbackRayCluster = support_module().LoopbackRayCluster  # noqa: N806

    torch.set_num_threads(1)
    base = Path(tempfile.mkdtemp(prefix="bench-nodes-"))
    model = build_demo_model(base / "demo-tiny")
    cluster = LoopbackRayCluster(nodes=2).start()
    results = []
    saved = {k: os.environ.get(k) for k in cluster.client_env}
    try:
        for name, nnodes, on_cluster in RUNS:
            if args.only and name not in args.only:
                continue
            for key in cluster.client_env:
                os.environ.pop(key, None)
            if on_cluster:
                os.environ.update(cluster.client_env)
            else:
                os.environ["PATH"] = cluster.client_env["PATH"]
            spec, run_dir = make_run(base, name, model, args.steps, nnodes)
            adir, wall = run_attempt(spec, run_dir)
            times = step_times(adir / "metrics.jsonl")
            results.append((name, times, wall))
            mean = sum(times) / max(len(times), 1)
            print(f"{name:8s} steps 2..{args.steps}: {len(times)}   mean step {mean:.2f} s   launch wall {wall:.1f} s",
                  flush=True)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        left = cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(f"cluster stopped ({len(left)} processes left)")
    base_mean = {n: sum(t) / len(t) for n, t, _ in results if t}
    if "1-node" in base_mean and "2-nodes" in base_mean:
        print(f"two nodes / one node step time: {base_mean['2-nodes'] / base_mean['1-node']:.2f}x")
    if "private" in base_mean and "2-nodes" in base_mean:
        print(f"two nodes / private cluster step time: {base_mean['2-nodes'] / base_mean['private']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
