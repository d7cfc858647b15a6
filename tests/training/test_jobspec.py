"""The job spec: one typed, versioned form of job.json, refused with a clear message when it cannot be trusted."""
from __future__ import annotations

import json

import pytest

from training.backends.base import BackendError, load_spec
from training.jobspec import SPEC_VERSION, JobSpec, JobSpecError, read_spec

BASE = {"job_id": 7, "kind": "grpo", "backend": "local", "model": {"path": "/m"}, "data": {"train": "data/t.jsonl"},
        "reward": {"shaping": "raw", "components": [{"type": "function", "path": "reward/r.py"}]}, "hp": {"lr": 1}}


def test_round_trip_adds_the_version_and_keeps_every_field():
    spec = JobSpec.from_dict(BASE)
    out = spec.to_dict()
    assert out["version"] == SPEC_VERSION and out["job_id"] == "7" and out["data"] == {"train": "data/t.jsonl"}
    assert out["reward"]["components"] == [{"type": "function", "path": "reward/r.py", "weight": 1.0}]
    assert JobSpec.from_dict(out) == spec


@pytest.mark.parametrize(("change", "message"), [
    ({"version": SPEC_VERSION + 1}, "newer than this code reads"),
    ({"kind": "ppo"}, "kind must be one of"),
    ({"backend": "trl"}, "backend must be one of"),
    ({"model": {}}, "model.path is missing"),
    ({"data": {"val": "data/v.jsonl"}}, "data.train is missing"),
    ({"reward": {"shaping": "sigmoid"}}, "reward.shaping must be one of"),
    ({"reward": {"components": [{"type": "function", "path": "r.py", "weight": "heavy"}]}},
     r"reward.components\[0\].weight must be a number"),
    ({"hp": [1]}, "hp must be an object"),
])
def test_a_spec_that_cannot_be_trusted_is_refused_by_name(change, message):
    with pytest.raises(JobSpecError, match=message):
        JobSpec.from_dict({**BASE, **change})


def test_reading_from_a_run_directory(tmp_path):
    with pytest.raises(JobSpecError, match="no job.json"):
        read_spec(tmp_path)
    (tmp_path / "job.json").write_text("{")
    with pytest.raises(BackendError, match="not valid JSON"):
        load_spec(tmp_path)
    JobSpec.from_dict(BASE).write(tmp_path)
    assert read_spec(tmp_path).kind == "grpo" and json.loads((tmp_path / "job.json").read_text())["version"] == 1
