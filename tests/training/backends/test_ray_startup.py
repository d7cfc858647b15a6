"""A CPU rehearsal's private Ray node starts on a busy machine: its raylet never waits on a slow dashboard agent."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[3]

# A dashboard agent that takes longer to start than the raylet's hard-coded 15 s wait for its port files.
SLOW_AGENT = """
import time
try:
    cmdline = open("/proc/self/cmdline", "rb").read()
except OSError:
    cmdline = b""
if b"dashboard/agent.py" in cmdline:
    time.sleep(40)
"""

DRIVER = """
import sys
import ray
from training.verl_cpu.ray_startup import agent_ports_up_front, patient_node_lookup

patient_node_lookup()
agent_ports_up_front()
ray.init(address="local", num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])

@ray.remote
def add_one(x):
    return x + 1

print("answer", ray.get(add_one.remote(41)), flush=True)
ray.shutdown()
"""


def test_a_new_node_is_given_its_agents_ports_and_a_connecting_one_is_left_alone():
    from ray._private.ray_constants import DEFAULT_DASHBOARD_AGENT_LISTEN_PORT

    from training.verl_cpu.ray_startup import AGENT_PORT_FIELDS, free_loopback_ports, with_agent_ports

    seen = []
    init = with_agent_ports(lambda self, params, *a, **kw: seen.append(dict(vars(params))),
                            ports=lambda n: list(range(20001, 20001 + n)))
    params = SimpleNamespace(metrics_agent_port=None, metrics_export_port=0, runtime_env_agent_port=31000,
                             dashboard_agent_listen_port=DEFAULT_DASHBOARD_AGENT_LISTEN_PORT)
    init(None, params, head=True)
    assert seen[-1] == {"metrics_agent_port": 20001, "metrics_export_port": 20002, "runtime_env_agent_port": 31000,
                        "dashboard_agent_listen_port": 20003}  # Ray's shared default port is replaced too
    params = SimpleNamespace(**dict.fromkeys(AGENT_PORT_FIELDS))
    init(None, params, connect_only=True)
    assert seen[-1] == dict.fromkeys(AGENT_PORT_FIELDS)
    ports = free_loopback_ports(4)
    assert len(set(ports)) == 4 and all(1024 < p < 65536 for p in ports)


def test_the_raylet_is_told_the_agents_listen_port():
    from training.verl_cpu.ray_startup import raylet_knows_listen_port

    agent = "--dashboard_agent_command=python -u agent.py --grpc-port=1 --listen-port=20003 --head"
    assert raylet_knows_listen_port(["raylet", agent]) == ["raylet", agent, "--dashboard_agent_listen_port=20003"]
    told = ["raylet", agent, "--dashboard_agent_listen_port=5"]
    assert raylet_knows_listen_port(told) == told
    assert raylet_knows_listen_port(["raylet", "--dashboard_agent_command=python agent.py --listen-port=0"]) == [
        "raylet", "--dashboard_agent_command=python agent.py --listen-port=0"]


def _kill_processes_naming(text: str) -> None:
    """Ray processes of this test's node (found by its own temp dir in their argv): a sleeping agent may outlive
    its raylet."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if text.encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def test_a_private_ray_node_starts_although_its_dashboard_agent_is_slower_than_the_raylets_wait():
    """ray-project/ray#65983: without the agent ports chosen up front the raylet aborts after 15 s ("Timed out
    waiting for file .../metrics_agent_port_...") and ray.init fails with "The current node timed out during
    startup"."""
    work = Path(tempfile.mkdtemp(prefix="rlhf-ray-t", dir="/tmp"))  # short: Ray's socket paths must fit
    try:
        (work / "slow").mkdir()
        (work / "slow" / "sitecustomize.py").write_text(SLOW_AGENT)
        env = {**os.environ, "PYTHONPATH": f"{work / 'slow'}{os.pathsep}{REPO}", "RAY_ADDRESS": "",
               "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
        done = subprocess.run([sys.executable, "-c", DRIVER, str(work / "ray")], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=900)
        raylet_out = "".join(p.read_text(errors="replace") for p in (work / "ray").glob("session_*/logs/raylet.out"))
        assert "Timed out waiting for file" not in raylet_out
        assert done.returncode == 0 and "answer 42" in done.stdout, done.stderr[-3000:]
    finally:
        _kill_processes_naming(str(work))
        shutil.rmtree(work, ignore_errors=True)
