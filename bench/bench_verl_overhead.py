"""The app's overhead on a VERL run: steps/s through the app vs the same overrides run by hand.

    .venv/bin/python bench/bench_verl_overhead.py [--steps 20]

Both sides run VERL's real `python -m verl.trainer.main_ppo` (GRPO, the demo model, the CPU plugin,
batch 4, group 2) in the same run of this script, one after the other, on a scratch database and
scratch folders (WORKBENCH_VAR_DIR in a temporary folder):
  app   job_create -> job_launch (the Celery task body: run dir, parquet, reward wrapper, supervisor)
        while the run is synced every 2 s as beat does (metrics ingest, checkpoints, heartbeat);
  bare  the app attempt's exact argv and environment, started directly (no supervisor, no sync), in
        a copy of its run directory with its own checkpoint, metrics, Hydra and Ray folders.
Steps/s is counted over steps 2..N from VERL's own `timing_s/step` (step 1 carries start-up), and
the wall time of each launch is printed too. Target: the app's overhead under 5 %.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET_OVERHEAD = 0.05


def _setup_django(var_dir: Path) -> None:
    os.environ["WORKBENCH_VAR_DIR"] = str(var_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    for key in ("DATABASE_URL", "RUNS_ROOT", "MODELS_ROOT"):
        os.environ.pop(key, None)  # everything scratch, under var_dir
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _steps_per_s(metrics: Path) -> tuple[float, int]:
    """Steps/s over steps 2..N from VERL's per-step timing, and the number of steps logged."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    times = [r["data"]["timing_s/step"] for r in rows if r["step"] >= 2 and "timing_s/step" in r["data"]]
    steps = sum(1 for r in rows if "timing_s/step" in r["data"])
    return (len(times) / sum(times) if times else 0.0), steps


def _demo_dataset(project):
    """A ready prompt dataset version with the demo sums (36 train, 6 validation rows)."""
    import hashlib

    from training.demo import arithmetic_rows
    from webapp.datasets.models import Dataset, DatasetKind, DatasetRow, DatasetVersion, VersionStatus

    train, val = arithmetic_rows("train"), arithmetic_rows("val")[:6]
    dataset = Dataset.objects.create(project=project, name="arith", kind=DatasetKind.PROMPTS)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status=VersionStatus.READY,
                                            content_hash=hashlib.sha256(b"arith").hexdigest(),
                                            row_count=len(train) + len(val), train_count=len(train),
                                            val_count=len(val))
    DatasetRow.objects.bulk_create([
        DatasetRow(version=version, index=i, source_line=i + 1, split=split, data_source=r["data_source"],
                   ability=r["ability"], prompt=r["prompt"], ground_truth=r["ground_truth"],
                   extra_info=r["extra_info"], prompt_text=r["prompt"], prompt_chars=len(r["prompt"]),
                   row_hash=hashlib.sha256(f"{split}{i}".encode()).hexdigest())
        for i, (split, r) in enumerate([("train", r) for r in train] + [("val", r) for r in val])])
    return version


def _demo_model_entry(project, path: Path):
    from webapp.registry.models import ModelEntry, ModelKind

    return ModelEntry.objects.create(project=project, name="demo-tiny", kind=ModelKind.CAUSAL_LM, path=str(path))


def run_app(steps: int) -> tuple[Path, float]:
    """Create and launch the job as the app does; sync it every 2 s until it ends. Returns (attempt dir, wall s)."""
    import torch
    from django.conf import settings

    from training.demo import NEAR_MISS_SOURCE, build_demo_model
    from webapp.core.models import Project
    from webapp.rewards.services import reward_function_create
    from webapp.runs.models import JobState
    from webapp.runs.services import job_create, job_launch
    from webapp.runs.services.sync import sync_job

    torch.set_num_threads(1)
    project = Project.objects.create(slug="bench", name="bench")
    fn = reward_function_create(project=project, user=None, name="near-miss", source=NEAR_MISS_SOURCE)
    reward = {"shaping": "raw", "components": [{"type": "function", "version_id": fn.latest_version.pk,
                                                "weight": 1.0}]}
    model = _demo_model_entry(project, build_demo_model(Path(settings.MODELS_ROOT) / "demo-tiny"))
    # The launch message goes to the scratch broker folder, where no worker reads it: the launch
    # below is the task's body, run here.
    job = job_create(project=project, user=None, kind="grpo", backend="verl", preset="demo-cpu",
                     hp_overrides={"batch_size": 4, "group_size": 2, "max_steps": steps, "save_freq": 0,
                                   "test_freq": 0, "lr": 1e-3, "kl_coef": 0.02, "epochs": 100},
                     include_unreviewed=True, dataset_version=_demo_dataset(project), reward_spec=reward,
                     base_model=model)
    t0 = time.time()
    job_launch(job.pk)
    job.refresh_from_db()
    while job.state not in (JobState.SUCCEEDED, JobState.FAILED, JobState.LOST, JobState.CANCELLED):
        time.sleep(2)
        sync_job(job)
        job.refresh_from_db()
    wall = time.time() - t0
    adir = Path(job.run_dir) / "attempts" / "1"
    if job.state != JobState.SUCCEEDED:
        raise SystemExit(f"the app's job ended {job.state}: {job.error[-2000:]}")
    return adir, wall


def run_bare(app_attempt: Path) -> tuple[Path, float]:
    """The app attempt's argv and env, by hand, in a copy of its run dir (own outputs)."""
    app_run = app_attempt.parents[1]
    bare = app_run.with_name(app_run.name + "-bare")
    shutil.copytree(app_run, bare, ignore=shutil.ignore_patterns("attempts", "checkpoints", "samples", "export"))
    launch = json.loads((app_attempt / "launch.json").read_text())
    rename = {str(app_run): str(bare)}
    for tmp in launch.get("scratch_dirs") or []:
        rename[tmp] = tmp + "b"

    def swap(text: str) -> str:
        for old, new in rename.items():
            text = text.replace(old, new)
        return text

    argv = [swap(a) for a in launch["argv"]]
    env = {**os.environ, **{k: swap(str(v)) for k, v in launch["env"].items()}}
    out = bare / "attempts" / "1"
    out.mkdir(parents=True)
    t0 = time.time()
    with open(out / "log.txt", "wb") as log:
        rc = subprocess.run(argv, cwd=swap(launch["cwd"]), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True).returncode
    wall = time.time() - t0
    for tmp in launch.get("scratch_dirs") or []:
        shutil.rmtree(tmp + "b", ignore_errors=True)
    if rc != 0:
        raise SystemExit(f"the bare run failed ({rc}); see {out / 'log.txt'}")
    return out, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args(argv)
    var_dir = Path(tempfile.mkdtemp(prefix="bench-verl-"))
    try:
        _setup_django(var_dir)
        app_attempt, app_wall = run_app(args.steps)
        bare_attempt, bare_wall = run_bare(app_attempt)
        app_rate, app_steps = _steps_per_s(app_attempt / "metrics.jsonl")
        bare_rate, bare_steps = _steps_per_s(bare_attempt / "metrics.jsonl")
        overhead = bare_rate / app_rate - 1 if app_rate else float("inf")
        print(f"steps per launch       app {app_steps}   bare {bare_steps}")
        print(f"steps/s (steps 2..N)   app {app_rate:.3f}   bare {bare_rate:.3f}   ratio app/bare "
              f"{app_rate / bare_rate:.3f}")
        print(f"launch wall time (s)   app {app_wall:.1f}   bare {bare_wall:.1f}")
        verdict = "meets" if overhead < TARGET_OVERHEAD else "misses"
        print(f"app overhead {overhead * 100:+.1f} % per step ({verdict} the < {TARGET_OVERHEAD * 100:.0f} % target)")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(var_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
