"""A consumer step that marks this worker alive every few seconds while it consumes.

It runs on the consumer's own timer, so a worker whose consumer is stopped or wedged stops beating and
the run page says "worker offline" (webapp/core/workers.py reads the files).
"""
from __future__ import annotations

import contextlib
import logging
import os

from celery import bootsteps

log = logging.getLogger(__name__)


class WorkerHeartbeat(bootsteps.StartStopStep):
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.tref = None

    def start(self, c):
        from django.conf import settings

        self.name = c.hostname
        self.queues = sorted(q.name for q in c.task_consumer.queues) if c.task_consumer else []
        # which isolation reward code gets on this worker (bubblewrap is run once here): pages and /healthz show it
        from training.sandbox import isolation_info

        info = isolation_info()
        self.sandbox = {"mode": info["mode"], "ok": info["ok"], "reason": info["reason"]}
        self._beat()
        self.tref = c.timer.call_repeatedly(float(settings.WORKER_HEARTBEAT_S), self._beat)

    def _beat(self):
        from webapp.core.workers import beat

        try:
            beat(self.name, {"queues": self.queues, "pid": os.getpid(), "sandbox": self.sandbox})
        except OSError as exc:  # a full or read-only disk must not stop the worker
            log.warning("worker heartbeat not written: %s", exc)

    def stop(self, c):
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        from webapp.core.workers import forget

        with contextlib.suppress(OSError):
            forget(self.name)

    shutdown = stop
