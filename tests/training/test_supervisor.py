"""The attempt supervisor: logs, heartbeat, exit.json, cancel, and death of a SIGKILLed supervisor."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from training.supervisor import attempt_state, cancel, kill_lost_group, spawn_supervisor

CHILD = r"""
import os, subprocess, sys, time
grand = subprocess.Popen(["sleep", "60"])
open(sys.argv[1], "w").write(f"{os.getpid()} {grand.pid}")
print("child ready", flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """True for a live process; zombies (not reaped by a container's PID 1) count as dead."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait(cond, timeout: float = 120.0) -> bool:  # only a guard against a hang
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


def _attempt(tmp_path: Path, argv: list[str], **extra) -> Path:
    adir = tmp_path / "attempts" / "1"
    adir.mkdir(parents=True)
    (adir / "launch.json").write_text(json.dumps({"argv": argv, "env": {"HELLO": "world"}, "cwd": str(tmp_path),
                                                  **extra}))
    return adir


def _sleeper(tmp_path: Path) -> tuple[Path, Path]:
    pids = tmp_path / "pids.txt"
    return _attempt(tmp_path, [sys.executable, "-c", CHILD, str(pids)], stop_grace_s=5), pids


def test_a_finished_attempt_writes_log_and_exit_json(tmp_path):
    script = "import os; print('hi', os.environ['HELLO']); raise SystemExit(3)"
    adir = _attempt(tmp_path, [sys.executable, "-c", script])
    sup = spawn_supervisor(adir)
    assert _wait(lambda: (adir / "exit.json").exists())
    assert (adir / "supervisor.pid").read_text() == str(sup)
    result = json.loads((adir / "exit.json").read_text())
    assert result["returncode"] == 3 and result["cancelled"] is False
    assert "hi world" in (adir / "log.txt").read_text()
    assert attempt_state(adir) == "exited"


def test_cancel_stops_the_whole_process_group(tmp_path):
    adir, pids = _sleeper(tmp_path)
    spawn_supervisor(adir)
    assert _wait(lambda: pids.exists() and pids.read_text().strip() != "")
    child, grandchild = map(int, pids.read_text().split())
    assert _wait(lambda: (adir / "heartbeat").exists())
    beat = json.loads((adir / "heartbeat").read_text())
    assert beat["pid"] == child and attempt_state(adir) == "running"
    cancel(adir)
    assert _wait(lambda: (adir / "exit.json").exists())
    result = json.loads((adir / "exit.json").read_text())
    assert result["cancelled"] is True and result["returncode"] == -signal.SIGTERM
    assert _wait(lambda: not _alive(child) and not _alive(grandchild))


def test_a_slow_stop_keeps_the_heartbeat_fresh_until_exit_json(tmp_path):
    """`ray job stop` on a busy host can outlast the web app's staleness limit: the stopping supervisor still beats."""
    stopping = tmp_path / "stopping"
    slow_stop = [sys.executable, "-c", f"import pathlib, time; pathlib.Path({str(stopping)!r}).touch(); time.sleep(12)"]
    pids = tmp_path / "pids.txt"
    adir = _attempt(tmp_path, [sys.executable, "-c", CHILD, str(pids)], stop_grace_s=5, cancel_argv=slow_stop)
    spawn_supervisor(adir)
    assert _wait(lambda: pids.exists() and pids.read_text().strip() != "")
    cancel(adir)
    assert _wait(stopping.exists)
    seen = set()
    while not (adir / "exit.json").exists():  # at least the 12 s of the stop command
        seen.add(attempt_state(adir, stale_after_s=6))
        time.sleep(0.2)
    assert seen == {"running"}
    assert json.loads((adir / "exit.json").read_text())["cancelled"] is True


def test_sigkilled_supervisor_takes_the_child_along_and_goes_stale(tmp_path):
    adir, pids = _sleeper(tmp_path)
    sup = spawn_supervisor(adir)
    assert _wait(lambda: pids.exists() and pids.read_text().strip() != "")
    child = int(pids.read_text().split()[0])
    assert _wait(lambda: (adir / "heartbeat").exists())
    os.kill(sup, signal.SIGKILL)
    assert _wait(lambda: not _alive(child))  # PR_SET_PDEATHSIG
    assert not (adir / "exit.json").exists()
    assert _wait(lambda: attempt_state(adir, stale_after_s=2.5) == "lost")
    # grandchildren are outside PDEATHSIG's reach: the web app reaps the lost group
    grand = int(pids.read_text().split()[1])
    assert kill_lost_group(adir, stale_after_s=2.5)
    assert _wait(lambda: not _alive(grand))


def test_unusable_launch_json_is_reported(tmp_path):
    adir = tmp_path / "a"
    adir.mkdir()
    (adir / "launch.json").write_text("{not json")
    spawn_supervisor(adir)
    assert _wait(lambda: (adir / "exit.json").exists())
    result = json.loads((adir / "exit.json").read_text())
    assert result["returncode"] == 127 and "launch.json" in result["error"]


def test_state_of_an_attempt_that_never_started(tmp_path):
    adir = tmp_path / "b"
    adir.mkdir()
    (adir / "launch.json").write_text("{}")
    assert attempt_state(adir, stale_after_s=30) == "running"  # just launched
    old = time.time() - 120
    os.utime(adir / "launch.json", (old, old))
    assert attempt_state(adir, stale_after_s=30) == "lost"
    with pytest.raises(FileNotFoundError):
        spawn_supervisor(tmp_path)
