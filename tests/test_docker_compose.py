"""docker-compose.yml validates with Debian's docker-compose (no engine needed) and has every service."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_compose_declares_the_services_with_healthchecks_and_volumes():
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert set(spec["services"]) == {"db", "redis", "web", "worker", "worker-usercode", "worker-gpu", "beat"}
    for name in ("db", "redis", "web", "worker", "worker-usercode", "worker-gpu"):
        assert "healthcheck" in spec["services"][name], name
    gpu = spec["services"]["worker-gpu"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert gpu["build"]["dockerfile"] == "docker/Dockerfile.gpu"
    assert "-Q" in gpu["command"] and "gpu" in gpu["command"]
    assert {"pgdata", "redisdata", "workbench"} <= set(spec["volumes"])


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose not installed (apt-get install docker-compose)")
def test_compose_file_validates():
    env = dict(os.environ, SECRET_KEY="validate-only")
    proc = subprocess.run(["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# What the reward sandbox needs in the compose stack. Without a Docker engine here, the stack's conditions are
# recreated in tests/training/sandbox/test_fail_closed.py (Docker's seccomp rules for namespaces, a non-root
# user, masked /proc paths): there the sandbox refuses under each, and works once they are lifted, which is
# what these options do.
SANDBOX_OPTS = {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"}
RUNS_REWARD_CODE = ("web", "worker", "worker-usercode", "worker-gpu")  # launch probes, training, test-runs


def _user(dockerfile: Path) -> str:
    users = re.findall(r"^USER\s+(\S+)", dockerfile.read_text(), re.M)
    return users[-1] if users else "root"


def test_services_that_run_reward_code_get_what_bubblewrap_needs_and_check_it():
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in RUNS_REWARD_CODE:
        service = spec["services"][name]
        assert set(service.get("security_opt") or []) >= SANDBOX_OPTS, name
        assert not service.get("privileged") and "SYS_ADMIN" not in (service.get("cap_add") or []), name
        if name.startswith("worker"):  # a worker whose sandbox refuses is unhealthy, and says so
            assert "python3 -m training.sandbox" in " ".join(service["healthcheck"]["test"]), name
    assert "security_opt" not in spec["services"]["beat"]  # runs no reward code


def test_the_images_install_bubblewrap_and_run_the_app_as_an_unprivileged_user():
    for dockerfile in (ROOT / "docker" / "Dockerfile", ROOT / "docker" / "Dockerfile.gpu"):
        text = dockerfile.read_text()
        assert re.search(r"apt-get install[^\n]*\bbubblewrap\b", text), dockerfile.name
        assert _user(dockerfile) not in ("root", "0"), dockerfile.name  # never root: bwrap makes a user namespace
        assert text.index("USER ") < text.rindex("CMD "), dockerfile.name


def test_users_reward_code_has_its_own_worker_and_the_cpu_worker_never_takes_it():
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    queues = {name: svc["command"][svc["command"].index("-Q") + 1].split(",")
              for name, svc in spec["services"].items() if "-Q" in (svc.get("command") or [])}
    assert queues == {"worker": ["cpu"], "worker-usercode": ["usercode"], "worker-gpu": ["gpu"]}
