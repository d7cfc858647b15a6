"""A private Ray cluster that starts on a busy machine.

Ray's driver waits a fixed 30 s (ray/_private/node.py, not configurable) for its new raylet to register
with the GCS, then fails with "The current node timed out during startup". On a loaded 2-core host the
raylet can need longer. `patient_node_lookup` makes the GCS lookup behind that loop keep asking for up to
STARTUP_WAIT_S, so only a raylet that really never comes up fails the start. Ray's own knobs for the
other start-up waits (GCS port, worker registration) are in RAY_STARTUP_ENV.

Ray's raylet starts every worker process at nice 15 (`worker_niceness`), below the raylet and the GCS: on a
GPU node the workers only feed the GPU, but on a CPU host the workers are the whole training, and beside any
other busy process (a second job, the web server, a test suite) they get a few percent of a core. The
cluster's workers run at the priority of the process that started it, as the local backend's training does.

The raylet itself waits a hard-coded 15 s (node_manager.cc WaitForDashboardAgentPorts, ray-project/ray#65983)
for its dashboard agent to write the agent's port files, and aborts when a slow import misses it; it only waits
for a port left at 0. `agent_ports_up_front` gives a new local node its agents' ports before it starts.
"""
from __future__ import annotations

import re
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STARTUP_WAIT_S = 600

RAY_STARTUP_ENV = {
    "RAY_gcs_server_port_wait_time_s": str(STARTUP_WAIT_S),  # the GCS writing its port (default 30 s)
    "RAY_worker_register_timeout_seconds": str(STARTUP_WAIT_S),  # a worker importing torch and VERL (60 s)
    "RAY_worker_niceness": "0",  # the trainer's workers at their starter's priority, not nice 15
}


# The ports the raylet would otherwise wait for its agents to report (RayParams fields).
AGENT_PORT_FIELDS = ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port",
                     "runtime_env_agent_port")


def free_loopback_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (held together while chosen, so they differ)."""
    held = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def with_agent_ports(node_init: Callable[..., Any],
                     ports: Callable[[int], list[int]] = free_loopback_ports) -> Callable:
    """Ray's `Node.__init__`, with every agent port the caller left unset (or at Ray's fixed default listen port,
    which two clusters on one host would share) chosen before a new node starts. A node that only connects to a
    running cluster reads its ports from the cluster and is left alone."""
    from ray._private.ray_constants import DEFAULT_DASHBOARD_AGENT_LISTEN_PORT

    def left_to_ray(ray_params: Any, field: str) -> bool:
        value = getattr(ray_params, field, None)
        return not value or (field == "dashboard_agent_listen_port" and value == DEFAULT_DASHBOARD_AGENT_LISTEN_PORT)

    def init(self: Any, ray_params: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("connect_only", False):
            missing = [field for field in AGENT_PORT_FIELDS if left_to_ray(ray_params, field)]
            for field, port in zip(missing, ports(len(missing)) if missing else [], strict=True):
                setattr(ray_params, field, port)
        return node_init(self, ray_params, *args, **kwargs)

    init._agent_ports = True  # type: ignore[attr-defined]
    return init


def raylet_knows_listen_port(command: list[str]) -> list[str]:
    """The raylet's argv with the agent's HTTP listen port passed on: Ray 2.60 gives the agent `--listen-port` but
    not the raylet, which then waits for the agent to report it (after the agent has loaded all its modules)."""
    if any(arg.startswith("--dashboard_agent_listen_port=") for arg in command):
        return command
    for arg in command:
        found = re.search(r"--listen-port=(\d+)", arg) if arg.startswith("--dashboard_agent_command=") else None
        if found and int(found.group(1)) > 0:
            return [*command, f"--dashboard_agent_listen_port={found.group(1)}"]
    return command


def with_raylet_listen_port(start_ray_process: Callable[..., Any]) -> Callable:
    from ray._private.ray_constants import PROCESS_TYPE_RAYLET

    def start(command: list[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        if process_type == PROCESS_TYPE_RAYLET:
            command = raylet_knows_listen_port(command)
        return start_ray_process(command, process_type, *args, **kwargs)

    start._agent_ports = True  # type: ignore[attr-defined]
    return start


def agent_ports_up_front() -> None:
    from ray._private import node, services

    if not getattr(node.Node.__init__, "_agent_ports", False):
        node.Node.__init__ = with_agent_ports(node.Node.__init__)
    if not getattr(services.start_ray_process, "_agent_ports", False):
        services.start_ray_process = with_raylet_listen_port(services.start_ray_process)


def raylet_running(node_id: str) -> bool:
    """Whether the raylet of `node_id` is still a live process on this host."""
    want = f"--node_id={node_id}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"/raylet") and want in argv:
            return True
    return False


def patient(get_node: Callable[..., Any], wait_s: float = STARTUP_WAIT_S,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
            alive: Callable[[str], bool] = raylet_running) -> Callable:
    """`get_node(gcs_address, node_id)` retried on RuntimeError (the node is not registered yet) until `wait_s`
    has passed, or at once given up when the node's raylet has exited (on a busy host its dashboard agent can miss
    the raylet's own fixed 15 s wait for the agent's port file, ray-project/ray#65983: see the raylet.out log)."""
    def lookup(gcs_address: Any, node_id: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = clock() + wait_s
        while True:
            try:
                return get_node(gcs_address, node_id, *args, **kwargs)
            except RuntimeError:
                if clock() >= deadline:
                    raise
                if not alive(str(node_id)):
                    print(f"Ray's raylet for node {node_id} exited during start-up: see raylet.out in the "
                          "session's logs folder", file=sys.stderr, flush=True)
                    raise
                sleep(0.5)

    lookup._patient = True  # type: ignore[attr-defined]
    return lookup


def patient_node_lookup() -> None:
    from ray._private import services

    if not getattr(services.get_node, "_patient", False):
        services.get_node = patient(services.get_node)
