"""Untrusted reward code trying to get out: each attempt is contained and reported, the caller lives on.

The reward below runs one "attack" per sample (picked by solution_str) and returns what it achieved
as extra keys ({"score", "outcome"}): "blocked: <error>" or what it managed to read or do.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from training.sandbox import RewardSandbox, SandboxLimits, isolation_info
from training.sandbox.isolation import REPO_ROOT

ATTACKS = r'''
import ctypes, os, signal, socket, time

def attempt(kind, arg):
    if kind == "connect":
        host, port = arg.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=30).close()
        return "connected"
    if kind == "dns":
        return repr(socket.getaddrinfo(arg, 80))
    if kind == "read":
        with open(arg, "rb") as f:
            return "read %d bytes: %r" % (len(f.read()), arg)
    if kind == "listdir":
        return repr(sorted(os.listdir(arg)))
    if kind == "env":
        return repr(dict(os.environ))
    if kind == "proc_environ":
        found = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    found.append(open("/proc/%s/environ" % pid, "rb").read().decode(errors="replace"))
                except OSError:
                    pass
        return "\n".join(found)
    if kind == "write":
        with open(arg, "w") as f:
            f.write("owned")
        return "wrote " + arg
    if kind == "bigfile":
        with open("/tmp/big", "wb") as f:
            f.write(b"x" * (int(arg) << 20))
        return "wrote %s MB" % arg
    if kind == "uid":
        return "uid=%d euid=%d" % (os.getuid(), os.geteuid())
    if kind == "setuid0":
        os.setuid(0)
        return "became root"
    if kind == "ctypes_setuid":
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.setuid(0)
        return "setuid rc=%d errno=%d uid=%d" % (rc, ctypes.get_errno(), os.getuid())
    if kind == "ctypes_segv":
        ctypes.string_at(0)
        return "survived"
    if kind == "alloc":
        blob = bytearray(int(arg) << 30)
        return "allocated %d bytes" % len(blob)
    if kind == "kill_parent":
        os.kill(os.getppid(), signal.SIGKILL)
        return "signalled ppid %d" % os.getppid()
    if kind == "kill_pid":
        os.kill(int(arg), signal.SIGKILL)
        return "signalled " + arg
    if kind == "killpg":
        os.killpg(os.getpgid(0), signal.SIGKILL)
        return "survived killpg"
    if kind == "killpg0":
        os.killpg(0, signal.SIGKILL)
        return "survived killpg(0)"
    if kind == "kill_all":
        os.kill(-1, signal.SIGKILL)
        return "sent SIGKILL to every process it may signal"
    if kind == "fork_count":
        kids = []
        try:
            while len(kids) < 2000:
                pid = os.fork()
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                kids.append(pid)
        except OSError as exc:
            return "forked %d then %s" % (len(kids), type(exc).__name__)
        return "forked %d" % len(kids)
    if kind == "fork_bomb":
        while True:
            os.fork()
    if kind == "procs":
        return "%d processes" % sum(1 for p in os.listdir("/proc") if p.isdigit())
    return "ok"

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    kind = solution_str
    try:
        outcome = attempt(kind, ground_truth)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) or type(exc).__name__ == "_Timeout":
            raise
        return {"score": 0.0, "outcome": "blocked: %s: %s" % (type(exc).__name__, exc)}
    return {"score": 1.0, "outcome": outcome}
'''

SECRET = "s3cr3t-do-not-leak-7f1c"


@pytest.fixture(scope="module")
def listener():
    """A TCP server on 127.0.0.1 that this (host) process can reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield srv.getsockname()[1]
    srv.close()


@pytest.fixture(scope="module")
def sandbox():
    limits = SandboxLimits(time_limit_s=5.0, memory_mb=512, max_file_mb=4, max_procs=16, max_restarts=10)
    # a world-readable system file and dir, hidden on request, stand in for the app's media/run dirs
    with RewardSandbox(ATTACKS, limits=limits, hidden_paths=["/etc/os-release", "/usr/share/doc"]) as sb:
        yield sb


def attack(sb: RewardSandbox, kind: str, arg: str = "") -> tuple[float | None, str, str | None]:
    res = sb.score_batch([{"data_source": "x", "solution_str": kind, "ground_truth": arg, "extra_info": None}])[0]
    return res.score, str(res.extra.get("outcome", "")), res.error


def assert_parent_alive_and_sandbox_works(sb: RewardSandbox) -> None:
    assert attack(sb, "noop") == (1.0, "ok", None)


def test_the_mode_here_is_bubblewrap():
    info = isolation_info()
    assert info["mode"] == "bubblewrap", info  # bwrap is installed here and in CI
    assert any("uid 65534" in d for d in info["details"])


def test_no_network_to_localhost_or_dns(sandbox, listener):
    socket.create_connection(("127.0.0.1", listener), timeout=30).close()  # reachable from the host...
    score, outcome, _ = attack(sandbox, "connect", f"127.0.0.1:{listener}")
    assert outcome.startswith("blocked"), outcome  # ...not from the sandbox
    assert attack(sandbox, "connect", "127.0.0.1:6379")[1].startswith("blocked")
    assert attack(sandbox, "dns", "example.com")[1].startswith("blocked")
    assert_parent_alive_and_sandbox_works(sandbox)


def test_it_cannot_read_shadow_or_the_app_or_hidden_paths(sandbox):
    assert attack(sandbox, "read", "/etc/shadow")[1].startswith("blocked")
    settings = REPO_ROOT / "webapp" / "settings.py"
    own_file = Path(__file__).resolve()
    for path in (settings, own_file, REPO_ROOT / "pyproject.toml"):
        assert attack(sandbox, "read", str(path))[1].startswith("blocked"), path
    listing = attack(sandbox, "listdir", str(REPO_ROOT))[1]  # at most the venv's folder, or not there at all
    assert listing in ("['.venv']", "[]") or "FileNotFoundError" in listing
    assert attack(sandbox, "read", "/etc/os-release")[1] == "read 0 bytes: '/etc/os-release'"
    assert attack(sandbox, "listdir", "/usr/share/doc")[1] == "[]"
    assert attack(sandbox, "listdir", os.path.expanduser("~"))[1] in ("[]", "['.pyenv']")
    assert attack(sandbox, "read", "/etc/hostname")[1].startswith("read")  # the rest of / stays readable


def test_it_sees_no_app_environment(sandbox, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", SECRET)
    monkeypatch.setenv("DATABASE_URL", f"postgres://u:{SECRET}@db/x")
    with RewardSandbox(ATTACKS) as fresh:  # started after the secret was set
        env = attack(fresh, "env")[1]
        assert SECRET not in env and "SECRET_KEY" not in env and "DATABASE_URL" not in env
        assert "HOME': '/tmp'" in env
        assert SECRET not in attack(fresh, "proc_environ")[1]


def test_it_can_write_only_its_private_tmp(sandbox):
    assert attack(sandbox, "write", "/tmp/mine.txt")[1] == "wrote /tmp/mine.txt"
    for target in ("/etc/owned", "/usr/lib/owned", str(REPO_ROOT / "owned"), "/var/tmp/owned",
                   str(REPO_ROOT / ".venv" / "owned")):
        assert attack(sandbox, "write", target)[1].startswith("blocked"), target
        assert not os.path.exists(target)
    outcome = attack(sandbox, "bigfile", "8")[1]  # max_file_mb=4
    assert outcome.startswith("blocked") and "File too large" in outcome


def test_it_runs_as_nobody_and_cannot_become_root(sandbox):
    assert attack(sandbox, "uid")[1] == "uid=65534 euid=65534"
    assert attack(sandbox, "setuid0")[1].startswith("blocked")
    assert "uid=65534" in attack(sandbox, "ctypes_setuid")[1]


def test_a_segfault_via_ctypes_is_reported_and_the_sandbox_restarts(sandbox):
    score, _, error = attack(sandbox, "ctypes_segv")
    assert score is None and "SIGSEGV" in error
    assert_parent_alive_and_sandbox_works(sandbox)


def test_allocating_10_gb_fails_inside(sandbox):
    outcome = attack(sandbox, "alloc", "10")[1]
    assert outcome.startswith("blocked: MemoryError")
    assert_parent_alive_and_sandbox_works(sandbox)


def test_killing_the_parent_fails_and_killpg_only_kills_the_sandbox(sandbox):
    me = os.getpid()
    assert attack(sandbox, "kill_pid", str(me))[1].startswith("blocked")  # our pid is not even visible
    attack(sandbox, "kill_parent")  # the parent it sees is bubblewrap's init: ignored or refused
    attack(sandbox, "kill_all")  # kill(-1): only reaches processes inside the sandbox
    attack(sandbox, "killpg")  # its process group as seen from outside is not visible inside
    score, _, error = attack(sandbox, "killpg0")  # its own group: the sandbox kills itself
    assert score is None and "killed" in error
    assert os.getpid() == me
    assert_parent_alive_and_sandbox_works(sandbox)


def test_fork_bombs_hit_the_process_limit(sandbox):
    outcome = attack(sandbox, "fork_count")[1]
    forked = int(outcome.split()[1])
    # max_procs=16 (threads included) on top of the tasks the sandbox's uid had elsewhere when this sandbox
    # process started (other sandboxes, e.g. of parallel tests, that may have ended since)
    assert forked < 16 + sandbox._child.nproc_base and "BlockingIOError" in outcome, outcome
    assert attack(sandbox, "fork_bomb")[1] == "blocked: BlockingIOError: [Errno 11] Resource temporarily unavailable"
    # bwrap's init and the harness remain: the strays were killed (SIGKILL is delivered asynchronously,
    # so give the reaper a moment before calling it a leak)
    deadline, procs = time.time() + 60, None  # generous: a loaded machine delays the reaping
    while procs != "2 processes" and time.time() < deadline:
        procs = attack(sandbox, "procs")[1]
        if procs != "2 processes":
            time.sleep(0.2)
    assert procs == "2 processes"
    assert_parent_alive_and_sandbox_works(sandbox)
