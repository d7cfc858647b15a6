"""Sync and the rollout store: per-component series from VERL dumps (also when a dump lands after its
step's metrics line) and the store's retention after each sync."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from webapp.runs.models import MetricPoint, RunEvent
from webapp.runs.services import job_create, job_launch, sync_job

pytestmark = pytest.mark.django_db


def _job(project, engineer, prompts_version, tiny_model, reward_spec, **hp):
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 10, **hp}, dataset_version=prompts_version, reward_spec=reward_spec,
                     base_model=tiny_model, include_unreviewed=True)
    job_launch(job.pk)
    job.refresh_from_db()
    attempt = Path(job.run_dir) / "attempts" / "1"
    (attempt / "heartbeat").write_text(json.dumps({"time": time.time(), "pid": 1}))
    return job, attempt


def _log(attempt: Path, step: int) -> None:
    with (attempt / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"step": step, "data": {"critic/rewards/mean": 0.5}}) + "\n")


def _dump(job, step: int) -> None:
    """Rows as VERL's rollout_data_dir writes them from our reward wrapper (two components, one failing)."""
    rows = [{"input": "p", "output": "a", "gts": "1", "score": 1.0, "step": step, "r/exact": 1.0, "err/exact": 0.0,
             "r/fmt": 0.0, "err/fmt": 0.0},
            {"input": "p", "output": "b", "gts": "1", "score": 0.0, "step": step, "r/exact": 0.0, "err/exact": 0.0,
             "r/fmt": float("nan"), "err/fmt": 1.0}]
    folder = Path(job.run_dir) / "samples" / "rollout"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _series(job, name):
    return dict(MetricPoint.objects.filter(job=job, name=name).values_list("step", "value"))


def test_component_series_come_from_the_dump_even_when_it_lands_after_its_line(
        project, engineer, prompts_version, tiny_model, reward_spec, no_enqueue, fake_supervisor):
    job, attempt = _job(project, engineer, prompts_version, tiny_model, reward_spec)
    _dump(job, 1)
    _log(attempt, 1)
    _log(attempt, 2)  # step 2's dump is still being written
    sync_job(job)
    assert _series(job, "reward/exact/mean") == {1: 0.5}
    assert _series(job, "reward/fmt/error_share") == {1: 0.5}
    _dump(job, 2)
    sync_job(job)  # no new line: the late dump is read all the same
    assert _series(job, "reward/exact/mean") == {1: 0.5, 2: 0.5}
    assert _series(job, "reward/fmt/mean") == {1: 0.0, 2: 0.0} and _series(job, "reward/fmt/error_share")[2] == 0.5
    assert sync_job(job) == []  # and only once


def test_retention_prunes_the_store_after_each_sync(project, engineer, prompts_version, tiny_model, reward_spec,
                                                    no_enqueue, fake_supervisor):
    job, attempt = _job(project, engineer, prompts_version, tiny_model, reward_spec, rollout_keep_last=2,
                        rollout_keep_every=3)
    assert job.config["hp"]["rollout_keep_last"] == 2
    for step in range(1, 8):
        _dump(job, step)
        _log(attempt, step)
    sync_job(job)
    folder = Path(job.run_dir) / "samples" / "rollout"
    assert sorted(int(p.stem) for p in folder.glob("*.jsonl")) == [3, 6, 7]
    event = RunEvent.objects.get(job=job, kind="retention")
    assert event.data["rollout_steps_deleted"] == [1, 2, 4, 5] and "1, 2, 4, 5" in event.message
    # the series of the pruned steps were read before they went
    assert sorted(_series(job, "reward/exact/mean")) == list(range(1, 8))
