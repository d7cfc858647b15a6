"""A private Ray cluster that starts on a busy machine.

Ray's driver waits a fixed 30 s (ray/_private/node.py, not configurable) for its new raylet to register
with the GCS, then fails with "The current node timed out during startup". On a loaded 2-core host the
raylet can need longer. `patient_node_lookup` makes the GCS lookup behind that loop keep asking for up to
STARTUP_WAIT_S, so only a raylet that really never comes up fails the start. Ray's own knobs for the
other start-up waits (GCS port, worker registration) are in RAY_STARTUP_ENV.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

STARTUP_WAIT_S = 600

RAY_STARTUP_ENV = {
    "RAY_gcs_server_port_wait_time_s": str(STARTUP_WAIT_S),  # the GCS writing its port (default 30 s)
    "RAY_worker_register_timeout_seconds": str(STARTUP_WAIT_S),  # a worker importing torch and VERL (60 s)
}


def patient(get_node: Callable[..., Any], wait_s: float = STARTUP_WAIT_S,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Callable:
    """`get_node` retried on RuntimeError (the node is not registered yet) until `wait_s` has passed."""
    def lookup(*args: Any, **kwargs: Any) -> Any:
        deadline = clock() + wait_s
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if clock() >= deadline:
                    raise
                sleep(0.5)

    lookup._patient = True  # type: ignore[attr-defined]
    return lookup


def patient_node_lookup() -> None:
    from ray._private import services

    if not getattr(services.get_node, "_patient", False):
        services.get_node = patient(services.get_node)
