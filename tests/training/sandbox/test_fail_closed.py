"""The sandbox fails closed: without a working bubblewrap reward code does not run, unless an operator opts
in by name; and it never runs as root. Also under a default container's conditions (Docker's seccomp rules
for namespaces, a non-root user), which `container_conditions.py` recreates on this host."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.sandbox import RewardSandbox, SandboxPool, SandboxUnavailable, isolation
from training.sandbox.types import RewardLoadError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ITEM = {"data_source": "", "solution_str": "", "ground_truth": "", "extra_info": None}
WHOAMI = ("import os\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
          "    return {'score': 1.0, 'uid': os.getuid(), 'euid': os.geteuid()}\n")


def marker_reward(marker: Path) -> str:
    """A reward that leaves a file behind as soon as it is loaded (it can, without isolation)."""
    return (f"open({str(marker)!r}, 'w').write('ran')\n"
            "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")


def test_a_bwrap_that_cannot_make_namespaces_refuses_reward_code_and_says_how_to_fix_it(broken_bwrap, tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailable) as refused:
        RewardSandbox(marker_reward(marker)).start()
    message = str(refused.value)
    assert "setting up uid map: Permission denied" in message  # the probe ran this bwrap: not just `which`
    assert "apt-get install bubblewrap" in message and "REWARD_SANDBOX_ALLOW_UNISOLATED" in message
    with pytest.raises(SandboxUnavailable), SandboxPool(marker_reward(marker), size=2):
        pass
    assert not marker.exists()  # the reward's code never ran
    info = isolation.isolation_info()
    assert info["mode"] == "refused" and not info["ok"] and "Permission denied" in info["reason"]
    cli = subprocess.run([sys.executable, "-m", "training.sandbox"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert cli.returncode == 1 and "reward code does not run here" in cli.stdout


def test_only_the_exact_opt_in_value_runs_reward_code_without_isolation(broken_bwrap, monkeypatch, tmp_path):
    monkeypatch.setenv(isolation.ALLOW_UNISOLATED, "1")
    with pytest.raises(SandboxUnavailable, match="only 'reward-code-can-read-app-data' opts in"):
        RewardSandbox(marker_reward(tmp_path / "ran")).start()
    assert not (tmp_path / "ran").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="what root does")
def test_opted_in_as_root_the_reward_runs_as_uid_65534_or_not_at_all(broken_bwrap, monkeypatch):
    monkeypatch.setenv(isolation.ALLOW_UNISOLATED, isolation.UNISOLATED_CONSENT)
    unreachable = [p for p in isolation.visible_paths(isolation.hidden_paths()) if not isolation._others_can_reach(p)]
    if unreachable:  # uid 65534 could not run this interpreter: refused, not run as root
        with pytest.raises(SandboxUnavailable, match="would run reward code as root"):
            RewardSandbox(WHOAMI).start()
    # where uid 65534 can reach the interpreter, root drops to it before the reward loads
    monkeypatch.setattr(isolation, "_others_can_reach", lambda path: True)
    with RewardSandbox(WHOAMI) as sb:
        assert sb.mode == "rlimits"
        res = sb.score_batch([ITEM])[0]
    assert res.error is None and res.extra == {"uid": 65534, "euid": 65534}


@pytest.mark.skipif(os.geteuid() != 0, reason="what root does")
def test_the_harness_refuses_to_load_reward_code_as_root_whatever_it_was_told(monkeypatch, tmp_path):
    """Defence in depth: a plan that would keep root (as the old rlimits fallback did) loads nothing."""
    launch = isolation.Launch("rlimits", isolation.python_argv(), dict(isolation.CLEAN_ENV), str(tmp_path), None,
                              None, False, ["a plan that keeps root"])
    monkeypatch.setattr(isolation, "plan", lambda *a, **k: launch)
    marker = tmp_path / "ran"
    with pytest.raises(RewardLoadError, match="would run the reward as root"):
        RewardSandbox(marker_reward(marker)).start()
    assert not marker.exists()


# ---- a default container: Docker's seccomp rules for namespaces, a non-root user ---------------------------

SYSTEM_PYTHON = "/usr/bin/python3"  # readable by every uid (this venv's interpreter may not be)
DRIVER = r"""
import json, sys
from training.sandbox import RewardSandbox, SandboxLimits, SandboxUnavailable
source = sys.stdin.read()
items = [{"data_source": "", "solution_str": s, "ground_truth": "", "extra_info": None} for s in sys.argv[1:]]
try:
    with RewardSandbox(source, limits=SandboxLimits(time_limit_s=1.0, memory_mb=512)) as sb:
        out = {"mode": sb.mode, "results": [[r.score, r.extra, r.error] for r in sb.score_batch(items)]}
except SandboxUnavailable as exc:
    out = {"refused": str(exc)}
print(json.dumps(out))
"""
SNOOP = r"""
import os
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "alloc":
        bytearray(10 << 30)
    if solution_str == "loop":
        while True:
            pass
    try:
        open("/etc/shadow").read(1)
        shadow = "read"
    except OSError as exc:
        shadow = type(exc).__name__
    return {"score": 1.0, "uid": os.getuid(), "euid": os.geteuid(), "shadow": shadow,
            "secret": "SECRET_KEY" in os.environ}
"""
needs_container_host = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK) or sys.platform != "linux",
    reason="recreating a container's conditions needs root (to drop to a container user) and the system python3")


def in_container(args: list[str], *, uid: int | None, seccomp: bool = True, opt_in: bool = False,
                 source: str = SNOOP, masked_proc: bool = False) -> dict:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/tmp", "LANG": "C.UTF-8",
           "SECRET_KEY": "leak-me-not"}
    if opt_in:
        env[isolation.ALLOW_UNISOLATED] = isolation.UNISOLATED_CONSENT
    if seccomp:
        prefix = [SYSTEM_PYTHON, str(HERE / "container_conditions.py"), *(["--uid", str(uid)] if uid is not None
                                                                           else []), "--"]
    else:
        prefix = ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups"] if uid is not None else []
    if masked_proc:  # as Docker masks /proc/keys, /proc/timer_list, ... with bind mounts (systempaths)
        prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                  'mount --bind /dev/null /proc/keys && exec "$@"', "sh", *prefix]
    proc = subprocess.run([*prefix, SYSTEM_PYTHON, "-c", DRIVER, *args], input=source, env=env, cwd="/",
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@needs_container_host
def test_in_a_container_without_user_namespaces_the_sandbox_refuses_and_says_so():
    out = in_container(["ok"], uid=65534)
    assert "Creating new namespace failed" in out["refused"] or "No permissions to create new namespace" in \
        out["refused"]
    check = subprocess.run([SYSTEM_PYTHON, str(HERE / "container_conditions.py"), "--uid", "65534", "--",
                            SYSTEM_PYTHON, "-m", "training.sandbox", "--json"], cwd="/", capture_output=True,
                           text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert check.returncode == 1 and json.loads(check.stdout)["mode"] == "refused"
    # the control: the same user without those seccomp rules gets bubblewrap (the rules are what refuse)
    control = in_container(["ok"], uid=65534, seccomp=False)
    assert control["mode"] == "bubblewrap" and control["results"][0][1]["uid"] == 65534


@needs_container_host
@pytest.mark.skipif(not os.path.exists("/proc/keys"), reason="no /proc/keys to mask")
def test_in_a_container_whose_proc_has_masked_paths_the_sandbox_refuses():
    """Docker masks paths of /proc unless systempaths=unconfined: the kernel then refuses bubblewrap a new /proc."""
    out = in_container(["ok"], uid=65534, seccomp=False, masked_proc=True)
    assert "Can't mount proc" in out["refused"]


@needs_container_host
def test_in_a_container_the_opted_in_fallback_runs_as_the_unprivileged_user_with_its_limits():
    out = in_container(["ok", "alloc", "loop", "ok"], uid=65534, opt_in=True)
    assert out["mode"] == "rlimits"
    (score, extra, error), alloc, loop, after = out["results"]
    assert score == 1.0 and error is None
    assert extra["uid"] == extra["euid"] == 65534 and extra["shadow"] == "PermissionError" and not extra["secret"]
    assert alloc[2].startswith("MemoryError") and loop[2] == "timed out after 1 s (time_limit_s)"
    assert after[0] == 1.0


@needs_container_host
def test_in_a_container_running_as_root_the_opted_in_fallback_drops_to_uid_65534():
    refused = in_container(["ok"], uid=None)
    assert "refused" in refused
    out = in_container(["ok"], uid=None, opt_in=True)
    extra = out["results"][0][1]
    assert out["mode"] == "rlimits" and extra["uid"] == extra["euid"] == 65534 and extra["shadow"] == "PermissionError"
