"""The trainer writes each rollout dump's metrics beside it (`<step>.summary.json`); the sync reads that summary
instead of the dump, and computes the metrics from the dump when there is none (older runs) or when it describes
an older file. Both backends' writers write it: the local trainer's store and VERL's `_write_generations`."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from training import garbled, rollouts
from training.ingest import compute_rollout_metrics, rollout_metrics, write_rollout_summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rows(step: int, outputs: list[str]) -> list[dict]:
    return [{"input": f"p{i // 2}", "output": out, "score": float(i % 2), "step": step, "uid": f"{step}:{i // 2}",
             "components": {"exact": float(i % 2)}, "errors": {}} for i, out in enumerate(outputs)]


OUTPUTS = ["2 + 2 = 4", "loop " * 20, "caf\ufffd", "the answer is 4"]


def test_the_summary_holds_the_dumps_metrics_and_the_sync_reads_it_instead(tmp_path):
    rollouts.write_step(tmp_path, 3, _rows(3, OUTPUTS))
    assert not rollouts.summary_path(tmp_path, 3).exists()
    from_dump = rollout_metrics(tmp_path, 3)  # no summary: computed from the dump (an older run)
    assert from_dump[garbled.REPETITION_SHARE] == 0.25 and from_dump["reward/exact/mean"] == 0.5
    path = write_rollout_summary(tmp_path, 3)
    assert path == rollouts.summary_path(tmp_path, 3) and json.loads(path.read_text())["metrics"] == from_dump
    assert rollout_metrics(tmp_path, 3) == from_dump
    # read, not recomputed: a summary saying otherwise about this very file is believed
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "metrics": {"reward/exact/mean": 0.123}}))
    assert rollout_metrics(tmp_path, 3) == {"reward/exact/mean": 0.123}


def test_a_summary_of_an_older_dump_or_a_broken_one_is_not_used(tmp_path):
    rollouts.write_step(tmp_path, 4, _rows(4, OUTPUTS))
    write_rollout_summary(tmp_path, 4)
    rollouts.write_step(tmp_path, 4, _rows(4, ["fine"] * 6))  # the step written again (a resumed attempt)
    assert rollout_metrics(tmp_path, 4) == compute_rollout_metrics(tmp_path, 4)
    assert rollout_metrics(tmp_path, 4)[garbled.GARBLED_SHARE] == 0.0
    rollouts.summary_path(tmp_path, 4).write_text('{"dump": [1, ')
    assert rollout_metrics(tmp_path, 4) == compute_rollout_metrics(tmp_path, 4)
    assert write_rollout_summary(tmp_path, 5) is None and rollout_metrics(tmp_path, 5) == {}


def test_retention_deletes_a_steps_summary_with_its_dump(tmp_path):
    for step in (1, 2, 3):
        rollouts.write_step(tmp_path, step, _rows(step, OUTPUTS))
        write_rollout_summary(tmp_path, step)
    assert rollouts.prune(tmp_path, keep_last=1, keep_every=None, max_mb=None) == [1, 2]
    assert sorted(p.name for p in (tmp_path / "samples" / "rollout").iterdir()) == ["3.jsonl", "3.summary.json"]
    assert rollouts.steps(tmp_path) == [3]


def test_verls_writer_writes_the_summary_of_a_rollout_dump_not_of_a_validation_dump(tmp_path, monkeypatch):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from training.verl_cpu import rollout_summary

    monkeypatch.setattr(RayPPOTrainer, "_write_generations", rollout_summary.with_summary(
        RayPPOTrainer._write_generations))
    for kind in ("rollout", "val"):
        RayPPOTrainer._write_generations(["What is 2 + 2?"] * 4, OUTPUTS, [None] * 4, [1.0, 0.0, 0.0, 0.0], {},
                                         str(tmp_path / "samples" / kind), 7)
    assert json.loads(rollouts.summary_path(tmp_path, 7).read_text())["metrics"] == compute_rollout_metrics(
        tmp_path, 7)
    assert rollout_metrics(tmp_path, 7)[garbled.GARBLED_SHARE] == 0.5
    assert not (tmp_path / "samples" / "val" / "7.summary.json").exists()


@pytest.mark.slow
def test_the_plugin_patches_both_verl_trainers_when_they_are_imported():
    """install() imports no trainer itself (every VERL process loads the plugin); each is patched on import."""
    code = ("import sys; from training.verl_cpu import rollout_summary as r; r.install(); "
            "assert not any(m in sys.modules for m in r.TRAINERS); "
            "from verl.trainer.ppo.ray_trainer import RayPPOTrainer; "
            "assert RayPPOTrainer._write_generations._workbench_summary\n"
            "try:\n from verl.trainer.ppo.v1.trainer_base import PPOTrainer\n"
            "except ImportError:\n print('no v1')\n"
            "else:\n assert PPOTrainer._write_generations._workbench_summary; print('v1 patched')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "v1 patched" in out.stdout or "no v1" in out.stdout
