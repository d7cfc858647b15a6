"""Is any Celery worker consuming, and which reward sandbox does it have? Workers touch a heartbeat file
(jobs/heartbeat.py) that says their queues and their sandbox's isolation; pages read the files.

A stat of a few files per page view: no broker round trip (a `celery inspect ping` would block the
request for its timeout exactly when no worker answers).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from django.conf import settings

from training.rundir import write_json


def heartbeat_dir() -> Path:
    return Path(settings.WORKER_HEARTBEAT_DIR)


def beat(name: str, info: dict) -> None:
    """Record that worker `name` is consuming now (atomic: a reader never sees half a file)."""
    safe = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name)
    write_json(heartbeat_dir() / safe, {**info, "at": time.time()}, indent=None)


def forget(name: str) -> None:
    safe = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name)
    (heartbeat_dir() / safe).unlink(missing_ok=True)


def live_workers(now: float | None = None) -> list[str]:
    """Names of the workers whose heartbeat is fresh (three missed beats make one stale)."""
    now = time.time() if now is None else now
    stale_after = 3 * float(settings.WORKER_HEARTBEAT_S)
    try:
        entries = list(os.scandir(heartbeat_dir()))
    except FileNotFoundError:
        return []
    return sorted(e.name for e in entries
                  if not e.name.startswith(".") and now - e.stat().st_mtime <= stale_after)


def worker_online() -> bool:
    return bool(live_workers())


def live_worker_info(now: float | None = None) -> list[dict]:
    """The fresh heartbeats: {"name", "queues", "sandbox": {"mode", "ok", "reason"}}, by name."""
    out = []
    for name in live_workers(now):
        try:
            info = json.loads((heartbeat_dir() / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict):
            sandbox = info.get("sandbox") if isinstance(info.get("sandbox"), dict) else {}
            out.append({"name": name, "queues": list(info.get("queues") or []),
                        "sandbox": {"mode": str(sandbox.get("mode") or "unknown"), "ok": bool(sandbox.get("ok")),
                                    "reason": str(sandbox.get("reason") or "")}})
    return out
