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
    deadline = time.time() + 20
    while time.time() < deadline and not workers.live_workers():
        time.sleep(0.2)
    names = workers.live_workers()
    assert len(names) == 1 and names[0].startswith("test-"), proc.log_path.read_text()[-2000:]
    first = (beats / names[0]).stat().st_mtime
    time.sleep(2.5)
    assert (beats / names[0]).stat().st_mtime > first  # it keeps beating
    proc.terminate()
    proc.wait(timeout=30)
    assert workers.live_workers() == []
