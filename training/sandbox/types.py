"""Plain data types of the reward sandbox (no process handling here)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandbox process. Unknown keys are rejected by `from_dict`."""

    time_limit_s: float = 5.0  # wall clock per call
    batch_time_limit_s: float = 120.0  # CPU (RLIMIT_CPU) and wall clock per batch
    memory_mb: int = 1024  # RLIMIT_AS; importing torch (VERL's scorers) needs about 820 MB of it
    max_file_mb: int = 16  # RLIMIT_FSIZE
    max_procs: int = 64  # RLIMIT_NPROC: processes AND threads
    load_time_limit_s: float = 60.0  # importing the module (VERL's scorers import torch: ~5 s)
    tmp_mb: int = 64  # size of the private /tmp
    max_restarts: int = 3  # sandbox restarts (crash, hang) within one batch before giving up on it

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"sandbox limit {f.name} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0 or (value == 0 and f.name != "max_restarts"):
                raise ValueError(f"sandbox limit {f.name} must be a positive number, not {value!r}")
        if self.memory_mb < 64:
            raise ValueError(f"sandbox limit memory_mb must be at least 64 (got {self.memory_mb})")
        if self.max_procs < 4:
            raise ValueError(f"sandbox limit max_procs must be at least 4 (got {self.max_procs})")

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SandboxLimits:
        """Build from job.json's `sandbox` block; a typo in a key is an error, not a silent default."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown sandbox limit(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class ScoreResult:
    """The outcome of one sample. `error` set means it failed and `score` is None."""

    index: int
    score: float | None
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # a short reason, for tables and logs
    traceback: str | None = None  # from the user's code on; None when not an exception
    lineno: int | None = None  # the line of the user's source where it failed (for the editor)
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class SandboxError(RuntimeError):
    """The sandbox itself could not do its job (not a problem of one sample)."""


class RewardLoadError(SandboxError):
    """The reward source could not be loaded: a syntax or import error, no such function, a crash."""

    def __init__(self, message: str, *, lineno: int | None = None, traceback: str | None = None,
                 stderr: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.lineno = lineno
        self.traceback = traceback
        self.stderr = stderr
