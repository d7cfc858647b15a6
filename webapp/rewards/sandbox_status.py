"""Which isolation reward code gets, as the web app tells it (the sandbox itself is `training.sandbox`).

Fail closed: where bubblewrap does not work and no operator opted in, `training.sandbox` refuses to run
reward code; a launch, the probes and the pages say so with `sandbox_refusal` and `isolation_summary`.
"""
from __future__ import annotations

from training.sandbox import isolation_info
from webapp.core.workers import live_worker_info

REFUSED = "refused"  # the isolation recorded on a test-run or probe run the sandbox refused


def isolation_summary() -> dict:
    """Here and on each live worker (from its heartbeat), for the page: {"mode", "ok", "isolated",
    "details", "reason", "fix", "workers": [{"name", "queues", "sandbox": {"mode", "ok", "reason"}}]}."""
    return {**isolation_info(), "workers": live_worker_info()}


def sandbox_refusal() -> str:
    """Why reward code cannot run in this process ("" when it can): a launch checks it before the probes."""
    info = isolation_info()
    return "" if info["ok"] else f"Reward code cannot run here: {info['reason']}. {info['fix']}"
