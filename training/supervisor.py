"""Run one training attempt under supervision.

`python -m training.supervisor --attempt-dir DIR` reads DIR/launch.json ({"argv", "env", "cwd"}),
starts the command in its own process group with output to DIR/log.txt, rewrites DIR/heartbeat
every 2 s from a thread (also while it waits on a slow stop), stops the whole group when DIR/CANCEL
or DIR/LOST appears or the supervisor gets SIGTERM, and writes DIR/exit.json last. The child gets
PR_SET_PDEATHSIG=SIGKILL, so it dies with a SIGKILLed supervisor; the web app then sees a stale
heartbeat ("lost"). For a job submitted to a Ray cluster (launch.json "ray_job") the supervisor
asks Ray how the job ended: one that Ray reports dead for another reason than the trainer's exit
code is written as lost in exit.json.

Every process of an attempt carries ATTEMPT_ENV=DIR in its environment, so `kill_attempt` finds
them all on this host (the supervisor, the trainer's group and whatever escaped it) after the web
app has given the attempt up, and writes DIR/KILLED once none is left.

Stdlib only: this runs next to GPU jobs and must start fast.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from training.rundir import AttemptDir, write_json

HEARTBEAT_EVERY_S = 2.0
POLL_S = 0.25
STOP_GRACE_S = 10.0
# `ray job stop` returns once Ray has stopped the job; on a loaded 2-core host its CLI alone took 77 s to start.
# The heartbeat thread keeps the attempt alive meanwhile.
RAY_STOP_TIMEOUT_S = 600
PR_SET_PDEATHSIG = 1
ATTEMPT_ENV = "WORKBENCH_ATTEMPT_DIR"
REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = socket.gethostname()  # in the heartbeat: the web app adopts a supervisor its launch never recorded


def _child_preexec(supervisor_pid: int):
    def preexec() -> None:
        os.setsid()  # own session and process group: one killpg stops everything it started
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except OSError:
            pass  # not Linux: the heartbeat still reveals a dead supervisor
        if os.getppid() != supervisor_pid:  # the supervisor died before prctl took effect
            os._exit(1)
    return preexec


def _stop_group(pgid: int, proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after `grace_s`."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            if proc.poll() is not None and not _group_alive(pgid):
                return
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _scratch_dirs(launch: dict) -> list[str]:
    # Only absolute, non-root paths: they are deleted, and matched against process command lines.
    dirs = launch.get("scratch_dirs") or []
    return [d for d in dirs if isinstance(d, str) and os.path.isabs(d) and len(d.strip("/")) > 4]


def release_scratch(dirs: list[str]) -> int:
    """SIGKILL every process whose command line names one of `dirs`, then delete the dirs.

    A private Ray cluster's processes (GCS, raylet, workers) all name its temp dir; some leave
    the training process group, so killing the group alone can leave them running.
    """
    if not dirs:
        return 0
    killed, me = 0, os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(d in cmdline for d in dirs):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    return killed


def supervise(attempt_dir: str | Path) -> int:
    """Run the attempt to its end; returns the child's return code."""
    adir = AttemptDir(Path(attempt_dir).resolve())
    adir.supervisor_pid.write_text(str(os.getpid()))
    with open(adir.log, "ab", buffering=0) as log:
        return _supervise(adir, log)


def _supervise(adir: AttemptDir, log) -> int:
    started = time.time()
    stop = {"by": None}

    def on_term(signum, _frame) -> None:
        stop["by"] = "sigterm"

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        launch = json.loads(adir.launch.read_text())
        argv, cwd = list(launch["argv"]), launch.get("cwd") or str(adir.path)
        env = {**os.environ, **{k: str(v) for k, v in (launch.get("env") or {}).items()},
               ATTEMPT_ENV: str(adir.path)}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.write(f"supervisor: unusable launch.json: {exc}\n".encode())
        write_json(adir.exit, {"returncode": 127, "cancelled": False, "ended_at": time.time(),
                                                "started_at": started, "error": f"unusable launch.json: {exc}"})
        return 127
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                preexec_fn=_child_preexec(os.getpid()))
    except OSError as exc:
        log.write(f"supervisor: cannot start {argv[:1]}: {exc}\n".encode())
        write_json(adir.exit, {"returncode": 127, "cancelled": False, "ended_at": time.time(),
                                                "started_at": started, "error": str(exc)})
        return 127
    pgid = proc.pid  # setsid made the child its group leader
    grace = float(launch.get("stop_grace_s", STOP_GRACE_S))
    with _beating(adir, proc.pid):
        while proc.poll() is None:
            if stop["by"] is None and adir.cancel.exists():
                stop["by"] = "cancel"
            if stop["by"] is None and adir.lost.exists():  # given up by the web app (a stall, a clock skew)
                stop["by"] = "lost"
            if stop["by"] is not None:
                if launch.get("cancel_argv"):  # e.g. `ray job stop`: the group alone may not hold the job
                    with contextlib.suppress(OSError, subprocess.SubprocessError):  # _ray_job_end asks again
                        subprocess.run(launch["cancel_argv"], cwd=cwd, env=env, stdout=log, stderr=log,
                                       timeout=RAY_STOP_TIMEOUT_S)
                _stop_group(pgid, proc, grace)
                break
            time.sleep(POLL_S)
        rc = proc.wait()
        if _group_alive(pgid):  # stragglers the training process left behind
            _stop_group(pgid, proc, 2.0)
        release_scratch(_scratch_dirs(launch))
        extra = _ray_job_end(launch, stop["by"] is not None, log) if launch.get("ray_job") else {}
    write_json(adir.heartbeat, {"time": time.time(), "pid": proc.pid, "host": HOST})
    write_json(adir.exit, {"returncode": rc, "cancelled": stop["by"] in ("cancel", "sigterm"),
                                            "stopped_by": stop["by"], "ended_at": time.time(),
                                            "started_at": started, **extra})
    return rc


@contextlib.contextmanager
def _beating(adir: AttemptDir, pid: int):
    """DIR/heartbeat rewritten every HEARTBEAT_EVERY_S by a thread while the block runs. A thread, not the poll loop:
    the end of a run waits on `ray job stop`, the trainer's exit and Ray's report, which on a busy host outlast the
    web app's staleness limit, and a supervisor that is stopping its run is alive, not lost."""
    done = threading.Event()

    def beat() -> None:
        while True:
            with contextlib.suppress(OSError):
                write_json(adir.heartbeat, {"time": time.time(), "pid": pid, "host": HOST})
            if done.wait(HEARTBEAT_EVERY_S):
                return

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _ray_job_end(launch: dict, stopped_by_us: bool, log) -> dict:
    """Ray's word on a submitted job once `ray job submit` returned: {"ray_status", "lost"?}.

    The job is lost (and resumes from its last checkpoint) when Ray reports it dead for another
    reason than the trainer's exit code; a job still running there is stopped first.
    """
    from training.ray_cluster import TERMINAL, job_info, lost_reason

    job = launch["ray_job"]
    info = job_info(job["address"], job["submission_id"])
    reason = lost_reason(info, stopped_by_us)
    if info is not None and info["status"] not in TERMINAL and launch.get("cancel_argv"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(launch["cancel_argv"], env={**os.environ, **(launch.get("env") or {})},
                           stdout=log, stderr=log, timeout=RAY_STOP_TIMEOUT_S)
        if stopped_by_us:  # our own stop had not taken yet: Ray's word once it has
            info = job_info(job["address"], job["submission_id"])
            reason = lost_reason(info, stopped_by_us)
    if reason:
        log.write(f"supervisor: attempt lost: {reason}\n".encode())
    return {"ray_status": info, **({"lost": reason} if reason else {})}


def spawn_supervisor(attempt_dir: str | Path, python: str | None = None) -> int:
    """Start a detached supervisor for `attempt_dir` and return its pid at once.

    The supervisor is double-forked (`--daemonize`), so it is re-parented to init and never
    lingers as a zombie of the calling web/Celery process.
    """
    adir = AttemptDir(Path(attempt_dir).resolve())
    if not adir.launch.exists():
        raise FileNotFoundError(f"{adir.path} has no launch.json")
    env = dict(os.environ)
    env[ATTEMPT_ENV] = str(adir.path)  # inherited by the trainer and everything it starts
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([python or sys.executable, "-m", "training.supervisor", "--attempt-dir", str(adir.path),
                          "--daemonize"], cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise RuntimeError(f"could not start the supervisor: {out.stderr.strip() or out.stdout.strip()}")
    return int(out.stdout.strip())


def _read_heartbeat(adir: AttemptDir) -> float | None:
    try:
        return float(json.loads(adir.heartbeat.read_text())["time"])
    except (OSError, ValueError, KeyError, TypeError):
        try:
            return adir.heartbeat.stat().st_mtime
        except OSError:
            return None


def _pid_alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def attempt_state(attempt_dir: str | Path, stale_after_s: float = 30) -> str:
    """"exited" once exit.json exists, "running" while the heartbeat is fresh, else "lost"."""
    adir = AttemptDir(Path(attempt_dir))
    if adir.exit.exists():
        return "exited"
    beat = _read_heartbeat(adir)
    now = time.time()
    if beat is not None:
        return "running" if now - beat <= stale_after_s else "lost"
    # No heartbeat yet: still starting if the supervisor lives or the launch is recent.
    if _pid_alive(adir.supervisor_pid):
        return "running"
    try:
        return "running" if now - adir.launch.stat().st_mtime <= stale_after_s else "lost"
    except OSError:
        return "lost"


def cancel(attempt_dir: str | Path) -> None:
    """Ask the supervisor to stop the attempt (it polls for DIR/CANCEL)."""
    AttemptDir(Path(attempt_dir)).cancel.write_text(str(time.time()))


def kill_lost_group(attempt_dir: str | Path, stale_after_s: float = 30) -> bool:
    """Stop what is left of a "lost" attempt on this host; False if it is not lost (or nothing was found)."""
    if attempt_state(attempt_dir, stale_after_s) != "lost":
        return False
    found = bool(attempt_processes(attempt_dir))
    return kill_attempt(attempt_dir) and found


def _marked(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return marker in fh.read().split(b"\0")
    except OSError:  # gone, or another user's process
        return False


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has stopped for good


def attempt_processes(attempt_dir: str | Path) -> list[int]:
    """Live processes of this attempt on this host (those with its ATTEMPT_ENV marker, from /proc)."""
    marker = f"{ATTEMPT_ENV}={Path(attempt_dir).resolve()}".encode()
    try:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    return sorted(p for p in pids if p != os.getpid() and _marked(p, marker) and _running(p))


def kill_attempt(attempt_dir: str | Path, wait_s: float = 10.0) -> bool:
    """SIGKILL every process of the attempt on this host; True (and DIR/KILLED written) once none is left.

    DIR/LOST comes first: a supervisor that is merely slow (or runs on another host) stops its
    trainer itself when it sees it. SIGKILL also ends a stopped (SIGSTOP) process.
    """
    adir = AttemptDir(Path(attempt_dir).resolve())
    if not adir.lost.exists():
        adir.lost.write_text(str(time.time()))
    killed: set[int] = set()
    deadline = time.time() + wait_s
    while True:
        left = attempt_processes(adir.path)
        if not left or time.time() > deadline:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.1)
    if left:
        return False
    # no usable launch.json: nothing to release; a cluster that does not answer: its job is lost anyway
    with contextlib.suppress(OSError, ValueError, AttributeError, subprocess.SubprocessError):
        launch = json.loads(adir.launch.read_text())
        release_scratch(_scratch_dirs(launch))
        if launch.get("cancel_argv"):  # a job on a Ray cluster outlives the processes on this host
            subprocess.run(launch["cancel_argv"], env={**os.environ, **(launch.get("env") or {})},
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    write_json(adir.killed, {"time": time.time(), "host": socket.gethostname(), "pids": sorted(killed)})
    return True


def attempt_stopped(attempt_dir: str | Path) -> bool:
    """The attempt's own word that nothing of it runs any more: exit.json (supervisor) or KILLED (kill_attempt)."""
    adir = AttemptDir(Path(attempt_dir))
    return adir.exit.exists() or adir.killed.exists()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Supervise one training attempt (see module docstring).")
    ap.add_argument("--attempt-dir", required=True)
    ap.add_argument("--daemonize", action="store_true", help="detach, print the supervisor pid and return")
    ap.add_argument("--kill", action="store_true",
                    help="kill every process of this attempt on this host and acknowledge it (DIR/KILLED)")
    args = ap.parse_args(argv)
    adir = AttemptDir(Path(args.attempt_dir))
    if not adir.path.is_dir():
        print(f"error: {adir.path} is not a directory", file=sys.stderr)
        return 2
    if args.kill:
        if kill_attempt(adir.path):
            print(f"nothing of {adir.path} runs on {socket.gethostname()} any more")
            return 0
        print(f"error: processes of {adir.path} still run: {attempt_processes(adir.path)}", file=sys.stderr)
        return 1
    if args.daemonize:
        pid = os.fork()
        if pid > 0:
            print(pid, flush=True)
            os._exit(0)
        os.setsid()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        out = os.open(adir.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for fd in (1, 2):  # a supervisor crash lands in the attempt's log
            os.dup2(out, fd)
    return supervise(adir.path)


if __name__ == "__main__":
    sys.exit(main())
