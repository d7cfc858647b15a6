"""The reward sandbox inside a real container, started by a Docker engine with the options docker-compose.yml
gives the services that run reward code: bubblewrap isolates there, and a container without those options
refuses reward code (fails closed) instead of running it unisolated.

Needs a Docker engine (`docker info` answers) and a Debian bookworm base image. The image is the app image's
first layers: docker/Dockerfile's own bubblewrap + unprivileged-user step on top of WORKBENCH_TEST_BASE_IMAGE
(default python:3.11-slim-bookworm, as docker/Dockerfile; any bookworm image with python3 stands in where
Docker Hub cannot be reached), plus `training/`. Skipped without an engine.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = os.environ.get("WORKBENCH_TEST_BASE_IMAGE", "python:3.11-slim-bookworm")
RUNS_REWARD_CODE = ("web", "worker", "worker-usercode")  # the CPU image's services (worker-gpu: VERL's image)

# Tries what the audit's probing reward did: the app's secret, the host's shadow file, writes outside its
# folder, the network. Each key is 1 when the attempt succeeded.
PROBE_REWARD = '''
import os, socket
def _can(action):
    try:
        action()
        return 1
    except Exception:
        return 0
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 1.0, "uid": os.getuid(),
            "read_secret": _can(lambda: open("/var/lib/workbench/secret_key").read()),
            "read_shadow": _can(lambda: open("/etc/shadow").read()),
            "list_app_data": _can(lambda: os.listdir("/var/lib/workbench")),
            "write_data": _can(lambda: open("/var/lib/workbench/pwned", "w").write("x")),
            "write_etc": _can(lambda: open("/etc/pwned", "w").write("x")),
            "connect": _can(lambda: socket.create_connection(("127.0.0.1", 5432), timeout=2))}
'''
RUN_PROBE = f'''
import json
from training.sandbox import RewardSandbox
with RewardSandbox({PROBE_REWARD!r}) as sandbox:
    result = sandbox.score_batch([dict(data_source="", solution_str="", ground_truth="", extra_info=None)])[0]
print(json.dumps({{"mode": sandbox.mode, "error": result.error, **(result.extra or {{}})}}))
'''


def _docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])} ...: {proc.stderr[-2000:]}")
    return proc


def _engine_or_skip() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker client")
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}", timeout=20, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("docker info did not answer in 20 s")
    if info.returncode != 0:
        pytest.skip(f"needs a Docker engine: {info.stderr.strip()[:200]}")
    if (_docker("image", "inspect", BASE_IMAGE, check=False).returncode != 0
            and _docker("pull", BASE_IMAGE, timeout=600, check=False).returncode != 0):
        pytest.skip(f"base image {BASE_IMAGE} is not here and cannot be pulled (WORKBENCH_TEST_BASE_IMAGE)")


def _dockerfile_user_step() -> str:
    """docker/Dockerfile's step that installs bubblewrap and creates the unprivileged user, exactly."""
    text = (ROOT / "docker" / "Dockerfile").read_text()
    step = re.search(r"^RUN apt-get update[^\n]*bubblewrap(?:[^\n]*\\\n)*[^\n]*$", text, re.M)
    assert step, "docker/Dockerfile lost its bubblewrap step"
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    return f"{step.group(0)}\nWORKDIR /app\nCOPY training/ training/\nUSER {users[-1]}\n"


@pytest.fixture(scope="module")
def sandbox_image(tmp_path_factory):
    _engine_or_skip()
    context = tmp_path_factory.mktemp("compose-sandbox")
    shutil.copytree(ROOT / "training", context / "training", ignore=shutil.ignore_patterns("__pycache__"))
    (context / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\n{_dockerfile_user_step()}")
    tag = f"workbench-sandbox-test:{uuid.uuid4().hex[:8]}"
    _docker("build", "--network", "host", "-t", tag, str(context), timeout=900)
    yield tag
    _docker("image", "rm", "-f", tag, check=False)


@pytest.fixture(scope="module")
def app_data_volume(sandbox_image):
    """The stack's `workbench` volume as the app leaves it: the secret key, owned by the app's user, 0600."""
    name = f"workbench-test-{uuid.uuid4().hex[:8]}"
    _docker("volume", "create", name)
    _docker("run", "--rm", "-u", "0", "-v", f"{name}:/var/lib/workbench", sandbox_image, "sh", "-c",
            "echo s3cret > /var/lib/workbench/secret_key && chown -R workbench:workbench /var/lib/workbench "
            "&& chmod 600 /var/lib/workbench/secret_key")
    yield name
    _docker("volume", "rm", "-f", name, check=False)


def _security_opts(service: str) -> list[str]:
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return [arg for opt in spec["services"][service].get("security_opt") or [] for arg in ("--security-opt", opt)]


def _run(image: str, volume: str, opts: list[str], *command: str) -> subprocess.CompletedProcess:
    return _docker("run", "--rm", *opts, "-v", f"{volume}:/var/lib/workbench", image, *command, timeout=300,
                   check=False)


@pytest.mark.parametrize("service", RUNS_REWARD_CODE)
def test_with_the_compose_options_bubblewrap_isolates_reward_code_in_the_container(
        sandbox_image, app_data_volume, service):
    opts = _security_opts(service)
    health = _run(sandbox_image, app_data_volume, opts, "python3", "-m", "training.sandbox", "--json")
    assert health.returncode == 0, health.stdout + health.stderr  # the worker's health check passes
    info = json.loads(health.stdout)
    assert info["mode"] == "bubblewrap" and info["isolated"] and info["uid"] != 0
    probe = _run(sandbox_image, app_data_volume, opts, "python3", "-c", RUN_PROBE)
    assert probe.returncode == 0, probe.stderr[-2000:]
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen["mode"] == "bubblewrap" and seen["error"] is None, seen
    assert seen["uid"] != 0
    escaped = {key: seen[key] for key in ("read_secret", "read_shadow", "list_app_data", "write_data",
                                          "write_etc", "connect") if seen[key]}
    assert escaped == {}, f"reward code reached {sorted(escaped)} inside {service}'s container"
    # what the app user itself can do there, so the zeros above are the sandbox's doing
    app = _run(sandbox_image, app_data_volume, opts, "cat", "/var/lib/workbench/secret_key")
    assert app.stdout.strip() == "s3cret"


def test_a_default_container_refuses_reward_code_instead_of_running_it_unisolated(sandbox_image, app_data_volume):
    health = _run(sandbox_image, app_data_volume, [], "python3", "-m", "training.sandbox", "--json")
    assert health.returncode == 1  # the worker's health check fails, so the stack shows it unhealthy
    info = json.loads(health.stdout)
    assert info["mode"] == "refused" and not info["ok"] and info["reason"]
    probe = _run(sandbox_image, app_data_volume, [], "python3", "-c", RUN_PROBE)
    assert probe.returncode != 0 and "SandboxUnavailable" in probe.stderr
    assert "REWARD_SANDBOX_ALLOW_UNISOLATED" in probe.stderr  # says how to opt in, by name
