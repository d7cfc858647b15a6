"""A private Ray cluster that starts on a busy machine.

Ray's driver waits a fixed 30 s (ray/_private/node.py, not configurable) for its new raylet to register
with the GCS, then fails with "The current node timed out during startup". On a loaded 2-core host the
raylet can need longer. `patient_node_lookup` makes the GCS lookup behind that loop keep asking for up to
STARTUP_WAIT_S, so only a raylet that really never comes up fails the start. Ray's own knobs for the
other start-up waits (GCS port, worker registration) are in RAY_STARTUP_ENV.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STARTUP_WAIT_S = 600

RAY_STARTUP_ENV = {
    "RAY_gcs_server_port_wait_time_s": str(STARTUP_WAIT_S),  # the GCS writing its port (default 30 s)
    "RAY_worker_register_timeout_seconds": str(STARTUP_WAIT_S),  # a worker importing torch and VERL (60 s)
}


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
