"""docker-compose.yml validates with Debian's docker-compose (no engine needed) and has every service."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_compose_declares_the_services_with_healthchecks_and_volumes():
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert set(spec["services"]) == {"db", "redis", "web", "worker", "worker-gpu", "beat"}
    for name in ("db", "redis", "web", "worker", "worker-gpu"):
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
