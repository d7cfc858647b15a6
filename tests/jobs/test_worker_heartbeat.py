"""Worker heartbeats: fresh ones count; a real worker beats while it consumes and stops when it stops."""
from __future__ import annotations

import os
import time

import pytest

from webapp.core import workers


@pytest.fixture
def beats(settings, tmp_path, monkeypatch):
    folder = tmp_path / "heartbeats"
    settings.WORKER_HEARTBEAT_DIR = folder
    settings.WORKER_HEARTBEAT_S = 1.0
    # A worker process started by the test reads these from its environment.
    monkeypatch.setenv("WORKER_HEARTBEAT_DIR", str(folder))
    monkeypatch.setenv("WORKER_HEARTBEAT_S", "1.0")
    return folder


def test_only_fresh_heartbeats_count(beats):
    assert workers.live_workers() == [] and not workers.worker_online()
    workers.beat("celery@a", {"queues": ["cpu"]})
    workers.beat("celery@b", {"queues": ["cpu"]})
    old = time.time() - 10
    os.utime(beats / "celery@b", (old, old))  # b missed more than three beats
    assert workers.live_workers() == ["celery@a"] and workers.worker_online()
    workers.forget("celery@a")
    assert not workers.worker_online()


@pytest.mark.worker
def test_a_real_worker_beats_while_it_runs_and_stops_when_it_stops(beats, request):
    proc = request.getfixturevalue("celery_worker_proc")
    deadline = time.time() + 180  # only a guard against a hang
    while time.time() < deadline and len(workers.live_workers()) < 2:
        time.sleep(0.2)
    names = workers.live_workers()  # the cpu,gpu worker and the usercode worker, each with its own heartbeat
    assert len(names) == 2 and all(n.startswith("test-") for n in names), proc.log_path.read_text()[-2000:]
    assert {tuple(w["queues"]) for w in workers.live_worker_info()} == {("cpu", "gpu"), ("usercode",)}
    assert {w["sandbox"]["mode"] for w in workers.live_worker_info()} == {"bubblewrap"}
    names = [n for n in names if n.startswith("test-cpu-")]
    first = (beats / names[0]).stat().st_mtime
    deadline = time.time() + 120  # it keeps beating (the bound only guards against a hang)
    while time.time() < deadline and (beats / names[0]).stat().st_mtime <= first:
        time.sleep(0.2)
    assert (beats / names[0]).stat().st_mtime > first
    for p in (proc, proc.usercode):
        p.terminate()
        p.wait(timeout=30)
    assert workers.live_workers() == []
