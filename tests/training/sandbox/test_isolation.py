"""How sandboxes are started: the bubblewrap recipe, and what the UI is told (fail closed: test_fail_closed.py)."""
from __future__ import annotations

import os
import sys

import pytest

from training.sandbox import RewardSandbox, SandboxLimits, isolation
from training.sandbox.types import SandboxError, SandboxUnavailable


def test_the_interpreter_and_venv_stay_visible_and_the_app_is_hidden():
    hidden = isolation.hidden_paths(["/etc/os-release"])
    assert str(isolation.REPO_ROOT) in hidden and os.path.realpath("/etc/os-release") in hidden
    visible = isolation.visible_paths(hidden)
    assert os.path.realpath(sys.base_prefix) in visible
    assert os.path.realpath(sys.prefix) in visible  # the venv, even inside the (hidden) project dir
    assert str(isolation.REPO_ROOT) not in visible


def test_the_bwrap_command_binds_only_the_system_and_the_venv_and_drops_everything():
    argv = isolation._bwrap_argv(SandboxLimits(tmp_mb=32), isolation.hidden_paths(), as_root=True)
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert "/" not in binds and "/usr" in binds and "/etc" in binds  # an allow-list, not the host's root
    assert os.path.realpath(sys.prefix) in binds or any(os.path.realpath(sys.prefix).startswith(b + "/")
                                                        for b in binds)
    assert str(isolation.REPO_ROOT) not in binds and "/var" not in binds and "/home" not in binds
    tmp = argv.index("--tmpfs", argv.index("--proc"))
    assert argv[tmp - 2:tmp + 2] == ["--size", str(32 << 20), "--tmpfs", "/tmp"]
    for flag in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    user = isolation._bwrap_argv(SandboxLimits(), [], as_root=False)
    assert user[user.index("--uid") + 1] == "65534" and "--disable-userns" in user


def test_without_bwrap_nothing_runs_unless_an_operator_opts_in(monkeypatch):
    monkeypatch.setattr(isolation.shutil, "which", lambda name: None if name == "bwrap" else "/usr/bin/" + name)
    monkeypatch.delenv(isolation.ALLOW_UNISOLATED, raising=False)
    isolation.forget_probe()
    try:
        with pytest.raises(SandboxUnavailable, match="bwrap is not installed") as refused:
            isolation.plan(SandboxLimits())
        assert "apt-get install bubblewrap" in str(refused.value) and isolation.UNISOLATED_CONSENT in str(refused.value)
        with pytest.raises(SandboxUnavailable, match="bubblewrap' was requested but bwrap is not installed"):
            isolation.plan(SandboxLimits(), mode="bubblewrap")
        with pytest.raises(SandboxUnavailable):  # asking for rlimits by name is no way round it
            isolation.plan(SandboxLimits(), mode="rlimits")
        monkeypatch.setenv(isolation.ALLOW_UNISOLATED, isolation.UNISOLATED_CONSENT)
        monkeypatch.setattr(isolation, "_others_can_reach", lambda path: True)
        launch = isolation.plan(SandboxLimits())
        assert launch.mode == "rlimits" and launch.details[0].startswith("NOT ISOLATED")
        assert "bwrap is not installed" in launch.details[0] and "NOT masked" in launch.details[0]
    finally:
        isolation.forget_probe()
    with pytest.raises(ValueError, match="isolation must be"):
        isolation.plan(SandboxLimits(), mode="docker")


def test_isolation_info_matches_what_a_sandbox_uses():
    info = isolation.isolation_info()
    assert info["mode"] in isolation.MODES and info["details"] and info["ok"]
    with RewardSandbox("def compute_score(**kw):\n    return 1.0\n") as sb:
        assert sb.mode == info["mode"]


def test_requesting_bubblewrap_where_it_is_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(isolation, "_probe_bwrap", lambda as_root: "bwrap is not installed")
    monkeypatch.setenv(isolation.ALLOW_UNISOLATED, isolation.UNISOLATED_CONSENT)  # not even with the opt-in
    with pytest.raises((RuntimeError, SandboxError), match="bwrap is not installed"):
        RewardSandbox("def compute_score(**kw):\n    return 1.0\n", isolation="bubblewrap").start()


def test_nested_hidden_paths_keep_only_the_outer_one_unless_a_visible_path_lies_between():
    assert isolation.outermost_hidden(["/a/b", "/a", "/c", "/a/b"], []) == ["/a", "/c"]
    # /a/v is re-bound visible inside hidden /a: a secret inside it must still be masked
    assert isolation.outermost_hidden(["/a", "/a/v/secret"], ["/a/v"]) == ["/a", "/a/v/secret"]
    assert isolation.outermost_hidden(["/a", "/a/b"], ["/a"]) == ["/a", "/a/b"]  # /a itself stays visible


def test_a_sandbox_accepts_nested_hidden_paths_and_masks_them():
    if isolation.isolation_info()["mode"] != "bubblewrap":
        pytest.skip("bubblewrap is not usable here")
    inner = sorted(p for p in os.listdir("/usr/share/doc") if os.path.isdir(os.path.join("/usr/share/doc", p)))[0]
    inner = os.path.join("/usr/share/doc", inner)
    src = ("import os\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
           "    return float(len(os.listdir(solution_str))) if os.path.isdir(solution_str) else 0.0\n")
    # inner first: bwrap failed with "Can't remount readonly" when both were masked
    with RewardSandbox(src, hidden_paths=[inner, "/usr/share/doc"], isolation="bubblewrap") as sb:
        res = sb.score_batch([{"data_source": "", "solution_str": p, "ground_truth": "", "extra_info": None}
                              for p in (inner, "/usr/share/doc", "/usr/share")])
    assert [r.score for r in res[:2]] == [0.0, 0.0] and res[2].score > 0


def test_folders_outside_the_allow_list_do_not_exist_in_the_sandbox(tmp_path):
    """The app's data folders are absent wherever they live (here: under /var and /opt, hidden by no one)."""
    if isolation.isolation_info()["mode"] != "bubblewrap":
        pytest.skip("bubblewrap is not usable here")
    probes = [p for p in ("/var/lib/dpkg/status", "/var/log", "/opt", "/var/lib") if os.path.exists(p)]
    src = ("import os\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
           "    return 1.0 if os.path.exists(solution_str) else 0.0\n")
    with RewardSandbox(src, isolation="bubblewrap") as sb:
        res = sb.score_batch([{"data_source": "", "solution_str": p, "ground_truth": "", "extra_info": None}
                              for p in [*probes, "/usr/bin", "/etc/hostname", sys.executable]])
    assert [r.score for r in res] == [0.0] * len(probes) + [1.0, 1.0, 1.0]


def test_a_sandbox_starts_while_other_sandboxes_tasks_of_its_uid_grow(monkeypatch):
    """RLIMIT_NPROC counts the sandbox uid's tasks host-wide: tasks that other sandboxes (of parallel tests, or a
    pool's other members) start after this one counted them must not keep its harness from starting."""
    import subprocess

    uid = isolation.plan(SandboxLimits()).nproc_uid
    if uid is None:
        pytest.skip("no RLIMIT_NPROC budget in this isolation mode")
    others = [subprocess.Popen(["sleep", "120"], user=None if uid == os.getuid() else uid) for _ in range(20)]
    try:
        counted = isolation.count_tasks(uid) - len(others)  # as counted just before the others appeared
        monkeypatch.setattr(isolation.Launch, "nproc_base", lambda self: counted)
        source = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
        with RewardSandbox(source, limits=SandboxLimits(max_procs=16)) as sb:
            result = sb.score_batch([{"data_source": "x", "solution_str": "a", "ground_truth": "a"}])[0]
        assert (result.score, result.error) == (1.0, None)
    finally:
        for proc in others:
            proc.kill()
            proc.wait()
