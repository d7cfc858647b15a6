"""./run's process supervisor (scripts/supervise.sh): TERM stops the supervised process group; one that ignores TERM
(as a Celery worker stopped during mingle hung in its warm shutdown) is killed after the grace period, so that
Ctrl-C always ends ./run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.training.test_supervisor import _alive

ROOT = Path(__file__).resolve().parents[1]
CHILD = ("import os, signal, sys, time\n"
         "if sys.argv[2] == 'stubborn':\n"
         "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
         "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
         "time.sleep(600)\n")


def _supervise(tmp_path: Path, kind: str, grace_s: int) -> tuple[subprocess.Popen, int, int]:
    """A bash that sources the supervisor and supervises one child; returns it, the supervisor's and the child's pid."""
    (tmp_path / "logs").mkdir()
    pidfile = tmp_path / "child.pid"
    script = (f'source scripts/supervise.sh; pids=(); supervise child {sys.executable} -c "$CHILD" {pidfile} {kind}; '
              f'echo "${{pids[0]}}" > {tmp_path}/supervisor.pid; wait')
    proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, start_new_session=True,
                            env={**os.environ, "VAR": str(tmp_path), "CHILD": CHILD, "STOP_GRACE_S": str(grace_s)})
    deadline = time.monotonic() + 120  # a guard against a hang: starting Python on a busy machine
    while not (pidfile.exists() and (tmp_path / "supervisor.pid").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, int((tmp_path / "supervisor.pid").read_text()), int(pidfile.read_text())


@pytest.mark.parametrize("kind, grace_s", [("polite", 600), ("stubborn", 1)])
def test_term_stops_the_supervised_process_and_a_stubborn_one_is_killed_after_the_grace(tmp_path, kind, grace_s):
    proc, supervisor, child = _supervise(tmp_path, kind, grace_s)
    try:
        os.kill(supervisor, signal.SIGTERM)
        # polite: it stops at once, well before its 600 s grace; stubborn: it is killed after 1 s
        proc.wait(timeout=120)
        assert not _alive(child) and not _alive(supervisor)
        log = tmp_path / "logs" / "supervisor.log"
        assert not log.exists() or "restarting" not in log.read_text()  # stopped, not restarted
    finally:
        for pid in (child, supervisor):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
