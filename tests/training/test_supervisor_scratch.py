"""An attempt's scratch dirs (a CPU VERL run's private Ray temp dir) are released when it ends."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from training.supervisor import release_scratch


def started_naming(proc: subprocess.Popen, name: str) -> None:
    """Until the child's command line names `name`; fails with why when it exited first."""
    deadline = time.monotonic() + 300  # a hang guard only
    while name not in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"):
        assert proc.poll() is None, f"the child exited with {proc.returncode}: {proc.stderr.read()[-2000:]!r}"
        assert time.monotonic() < deadline, "the child never showed its command line"
        time.sleep(0.05)


def test_release_kills_the_processes_naming_a_scratch_dir_and_deletes_it(tmp_path):
    scratch = tmp_path / "rlhf-ray-test"
    scratch.mkdir()
    (scratch / "session.log").write_text("x")
    other = tmp_path / "rlhf-ray-other"
    naming, unrelated = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", str(path)],
                                          stderr=subprocess.PIPE) for path in (scratch, other))
    try:
        started_naming(naming, str(scratch))
        started_naming(unrelated, str(other))
        assert release_scratch([str(scratch)]) == 1
        assert naming.wait(timeout=120) != 0 and unrelated.poll() is None
        assert not scratch.exists()
    finally:
        unrelated.kill()
        naming.kill()


def test_the_supervisor_releases_scratch_dirs_when_the_attempt_ends(tmp_path):
    scratch = tmp_path / "rlhf-ray-run"
    adir = tmp_path / "attempts" / "1"
    adir.mkdir(parents=True)
    # The child leaves a process behind in its own session, as a Ray daemon can: only its command
    # line (naming the scratch dir) ties it to the attempt.
    code = ("import os, subprocess, sys; os.makedirs(sys.argv[1]); "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)', sys.argv[1]], "
            "start_new_session=True); print('started', flush=True)")
    (adir / "launch.json").write_text(json.dumps({"argv": [sys.executable, "-c", code, str(scratch)], "env": {},
                                                  "cwd": str(tmp_path), "scratch_dirs": [str(scratch)]}))
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run([sys.executable, "-m", "training.supervisor", "--attempt-dir", str(adir)], cwd=root,
                              timeout=600)  # only a guard: waiting for the leftover would take an hour
        assert done.returncode == 0
        assert "started" in (adir / "log.txt").read_text()
        assert not scratch.exists()
        leftover = subprocess.run(["pgrep", "-f", str(scratch)], capture_output=True, text=True).stdout.split()
        assert leftover == []
    finally:  # a leftover the supervisor missed goes with the test
        subprocess.run(["pkill", "-f", str(scratch)], check=False)
