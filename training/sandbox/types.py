"""Plain data types of the reward sandbox (no process handling here)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
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


class ScoreResult:
    """The outcome of one sample. `error` set means it failed and `score` is None.

    A plain __slots__ class rather than a dataclass: a batch builds one per sample, so construction is
    on the hot path; `extra` is created on first access instead of one empty dict per sample."""

    __slots__ = ("index", "score", "_extra", "error", "traceback", "lineno", "duration_ms")
    _FIELDS = ("index", "score", "extra", "error", "traceback", "lineno", "duration_ms")

    def __init__(self, index: int, score: float | None, extra: dict[str, Any] | None = None,
                 error: str | None = None, traceback: str | None = None, lineno: int | None = None,
                 duration_ms: float = 0.0) -> None:
        self.index = index
        self.score = score
        self._extra = extra
        self.error = error  # a short reason, for tables and logs
        self.traceback = traceback  # from the user's code on; None when not an exception
        self.lineno = lineno  # the line of the user's source where it failed (for the editor)
        self.duration_ms = duration_ms

    @property
    def extra(self) -> dict[str, Any]:
        extra = self._extra
        if extra is None:
            extra = self._extra = {}
        return extra

    @extra.setter
    def extra(self, value: dict[str, Any]) -> None:
        self._extra = value

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._FIELDS}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScoreResult):
            return NotImplemented
        return self.to_dict() == other.to_dict()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return "ScoreResult(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"


class OkResult(ScoreResult):
    """A ScoreResult for a sample that returned a plain number: a 3-argument constructor, because
    map() over 7 iterables costs ~0.1 us more per sample than over 3 (the batch decoder's hot path)."""

    __slots__ = ()

    def __init__(self, index: int, score: float, duration_ms: float) -> None:  # noqa: D107
        self.index = index
        self.score = score
        self._extra = None
        self.error = None
        self.traceback = None
        self.lineno = None
        self.duration_ms = duration_ms


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
