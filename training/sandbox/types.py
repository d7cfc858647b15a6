"""Plain data types of the reward sandbox (no process handling here)."""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

_MAY_BE_ZERO = ("max_restarts", "max_log_chars", "max_batch_log_chars")


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
    max_extra_chars: int = 4096  # a sample's extra values (as JSON) beyond this are clipped in the sandbox
    # what a reward prints (stdout/stderr) while scoring a sample is kept with it, up to this much per sample
    # and per batch (0: not kept); the rest is cut, with a note
    max_log_chars: int = 2000
    max_batch_log_chars: int = 65536

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"sandbox limit {f.name} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0 or (value == 0 and f.name not in _MAY_BE_ZERO):
                raise ValueError(f"sandbox limit {f.name} must be a positive number, not {value!r}")
        if self.memory_mb < 64:
            raise ValueError(f"sandbox limit memory_mb must be at least 64 (got {self.memory_mb})")
        if self.max_extra_chars < 256:
            raise ValueError(f"sandbox limit max_extra_chars must be at least 256 (got {self.max_extra_chars})")
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

    __slots__ = ("index", "score", "_extra", "error", "traceback", "lineno", "duration_ms", "log")
    _FIELDS = ("index", "score", "extra", "error", "traceback", "lineno", "duration_ms", "log")

    def __init__(self, index: int, score: float | None, extra: dict[str, Any] | None = None,
                 error: str | None = None, traceback: str | None = None, lineno: int | None = None,
                 duration_ms: float = 0.0, log: str | None = None) -> None:
        self.index = index
        self.score = score
        self._extra = extra
        self.error = error  # a short reason, for tables and logs
        self.traceback = traceback  # from the user's code on; None when not an exception
        self.lineno = lineno  # the line of the user's source where it failed (for the editor)
        self.duration_ms = duration_ms
        self.log = log  # what the reward printed while scoring this sample (capped), None when nothing

    def at(self, index: int) -> ScoreResult:
        """The same result at another index (a pool's shard placed in its batch)."""
        return ScoreResult(index, self.score, self._extra, self.error, self.traceback, self.lineno, self.duration_ms,
                           self.log)

    def failing(self, error: str) -> ScoreResult:
        """The same sample, failed for `error` (its extra values and log kept)."""
        return ScoreResult(self.index, None, self._extra, error, None, None, self.duration_ms, self.log)

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


Chunk = tuple  # (scores, runs, special): how the runner hands decoded results to ScoreBatch


class ScoreBatch(Sequence[ScoreResult]):
    """One batch's results, kept as columns: a batch of 1,000 is a few lists, not 1,000 objects.

    `scores` is a plain list (None where a sample failed); `errors` maps index -> reason. Indexing or
    iterating builds each ScoreResult on demand; the few that carry more than a number (an error,
    extra keys) are kept whole. Compares equal to any sequence of equal ScoreResults."""

    __slots__ = ("scores", "_runs", "_special", "_durations", "_expanded")

    def __init__(self) -> None:
        self.scores: list[float | None] = []
        self._runs: list[list] = []  # [[calls, seconds], ...] in order: each run's calls share its time
        self._special: dict[int, ScoreResult] = {}
        self._durations: list[float] = []
        self._expanded = 0  # runs already turned into per-sample durations

    def add(self, chunk: Chunk) -> None:
        scores, runs, special = chunk
        self.scores.extend(scores)
        self._runs.extend(runs)
        if special:
            self._special.update(special)

    def extend(self, other: ScoreBatch) -> None:
        """Append `other`'s results after these (its indexes shift by len(self)): a pool's shards, in order."""
        base = len(self.scores)
        self.scores.extend(other.scores)
        self._runs.extend(other._runs)
        for i, r in other._special.items():
            self._special[base + i] = r if base == 0 else r.at(base + i)

    def replace(self, res: ScoreResult) -> None:
        """Put `res` in place of the result at `res.index` (a failed one: its score becomes None)."""
        self._special[res.index] = res
        if res.error is not None:
            self.scores[res.index] = None

    def cap_logs(self, budget) -> None:
        """Keep the samples' logs within `budget` (a protocol.LogBudget), in index order."""
        for i in sorted(i for i, r in self._special.items() if r.log):
            budget.take(self._special[i])

    def slowest(self, k: int = 5) -> list[tuple[int, float]]:
        """The `k` slowest samples as (index, milliseconds), slowest first (ties: the lower index)."""
        durations = self.durations_ms
        order = sorted(range(len(durations)), key=lambda i: (-durations[i], i))[:max(0, k)]
        return [(i, durations[i]) for i in order]

    @property
    def durations_ms(self) -> list[float]:
        """Milliseconds per sample (calls that ran as one group share its time)."""
        runs, out = self._runs, self._durations
        for calls, seconds in runs[self._expanded:]:
            out.extend([seconds * 1000.0 / calls] * calls)
        self._expanded = len(runs)
        return out

    @property
    def special(self) -> dict[int, ScoreResult]:
        """The results kept whole (failures, dict returns), by index; read only."""
        return self._special

    @property
    def errors(self) -> dict[int, str]:
        return {i: r.error for i, r in self._special.items() if r.error is not None}

    def __len__(self) -> int:
        return len(self.scores)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self.scores)))]
        n = len(self.scores)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("ScoreBatch index out of range")
        res = self._special.get(i)
        return res if res is not None else ScoreResult(i, self.scores[i], None, None, None, None, self.durations_ms[i])

    def __iter__(self) -> Iterator[ScoreResult]:
        special, durations = self._special, self.durations_ms
        for i, score in enumerate(self.scores):
            res = special.get(i)
            yield res if res is not None else ScoreResult(i, score, None, None, None, None, durations[i])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ScoreBatch, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ScoreBatch({len(self.scores)} samples, {len(self.errors)} failed)"


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


class SandboxUnavailable(SandboxError):
    """No isolation works on this host and no operator opted out of it: reward code is not run (fail closed).

    `reason` says what failed, `fix` how to make the sandbox work; str() says both."""

    def __init__(self, reason: str, fix: str) -> None:
        self.reason, self.fix = reason, fix
        super().__init__(f"Reward code was not run: the sandbox cannot isolate it on this host ({reason}). {fix}")
