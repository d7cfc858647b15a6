"""A real short demo run for the web tests: a GRPO job created and launched by the runs services, trained by
the local backend in the test's process (no supervisor), then synced like the beat task does.

Its reward mixes two functions: the exact match, and a dict-returning `shape` reward that raises on answers
ending in 3 (so the run page has a component with errors)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from tests.webapp.monitoring.conftest import job_inputs

SHAPE_SOURCE = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = str(solution_str).strip()
    if text.endswith("3"):
        raise ValueError("no threes")
    return {"score": 1.0 if text.isdigit() else 0.0, "chars": float(len(text))}
'''
# a more lenient exact match: one off still counts (what a re-score compares against)
LENIENT_SOURCE = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    try:
        return 1.0 if abs(int(str(solution_str).strip()) - int(str(ground_truth).strip())) <= 1 else 0.0
    except ValueError:
        return 0.0
'''
WEIGHTS = {"exact_match_v1": 1.0, "shape_v1": 0.5}


def train_demo_job(project, user, model_dir: Path, steps: int = 3):
    """The job, trained for `steps` steps and synced (state succeeded, curves, rollout store)."""
    from training.local.train import run_job
    from training.rundir import RunDir
    from webapp.rewards.services import reward_function_create
    from webapp.runs.services import job_create, job_launch, sync_job

    inputs = job_inputs(project, model_dir)
    shape = reward_function_create(project=project, user=None, name="shape", source=SHAPE_SOURCE)
    inputs["reward_spec"]["components"].append({"type": "function", "version_id": shape.latest_version.pk,
                                                "weight": WEIGHTS["shape_v1"]})
    job = job_create(project=project, user=user, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": steps, "test_freq": 0, "save_freq": 0}, include_unreviewed=True,
                     **inputs)
    job_launch(job.pk)
    job.refresh_from_db()
    attempt = RunDir(job.run_dir).attempt(1)
    run_job(job.run_dir, attempt.metrics)
    attempt.exit.write_text(json.dumps({"returncode": 0, "cancelled": False, "ended_at": time.time()}))
    sync_job(job)
    job.refresh_from_db()
    return job
