"""Training backends: turn a run directory into the command that trains it (no Django here)."""
from __future__ import annotations

from training.backends.base import Backend, BackendError, LaunchPlan, get_backend

__all__ = ["Backend", "BackendError", "LaunchPlan", "get_backend"]
