"""Stall detection: a pure check of whether a running job has stopped making progress.

A job is stalled when no new metric step has arrived for longer than its limit: `after_s` when set,
otherwise `factor` × the median time between its recent steps, never under `floor_s`; before its first
step (model loading, first rollout) the limit is `first_step_s`. The caller feeds the wall times of the
newest steps of the running attempt and the attempt's start time, and acts: "notify" or
"cancel_resume" (stop the hung attempt and resume from the last checkpoint, at most `max_resumes` times).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

ACTIONS = ("notify", "cancel_resume")


class StallConfigError(ValueError):
    """A stall block that cannot work; the message names the field."""


@dataclass(frozen=True)
class StallConfig:
    enabled: bool = True
    after_s: float | None = None  # a fixed limit; None: relative to the recent step time
    factor: float = 10.0
    floor_s: float = 300.0
    first_step_s: float = 1800.0
    action: str = "notify"
    max_resumes: int = 1

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> StallConfig:
        raw = dict(raw or {})
        unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
        if unknown:
            raise StallConfigError(f"stall has unknown keys {unknown}; known: {sorted(cls.__dataclass_fields__)}")
        try:
            cfg = cls(enabled=bool(raw.get("enabled", True)),
                      after_s=None if raw.get("after_s") in (None, "") else float(raw["after_s"]),
                      factor=float(raw.get("factor", cls.factor)), floor_s=float(raw.get("floor_s", cls.floor_s)),
                      first_step_s=float(raw.get("first_step_s", cls.first_step_s)),
                      action=str(raw.get("action", cls.action)), max_resumes=int(raw.get("max_resumes", 1)))
        except (TypeError, ValueError) as exc:
            raise StallConfigError(f"stall values must be numbers: {exc}") from None
        if cfg.action not in ACTIONS:
            raise StallConfigError(f"stall.action must be one of {ACTIONS}, not {cfg.action!r}")
        for name in ("factor", "floor_s", "first_step_s") + (("after_s",) if cfg.after_s is not None else ()):
            value = getattr(cfg, name)
            if not (math.isfinite(value) and value > 0):
                raise StallConfigError(f"stall.{name} must be > 0, got {value:g}")
        if cfg.max_resumes < 0:
            raise StallConfigError(f"stall.max_resumes must be >= 0, got {cfg.max_resumes}")
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StallCheck:
    stalled: bool
    idle_s: float  # seconds since the last progress
    limit_s: float  # seconds of silence allowed
    step_s: float | None  # the median recent step time, when known


def check(cfg: StallConfig, now: float, started_at: float, step_times: Sequence[float]) -> StallCheck:
    """`step_times`: wall times (epoch seconds) of the attempt's newest steps, any order."""
    times = sorted(t for t in step_times if t is not None and math.isfinite(t))
    last = max([started_at, *times[-1:]])
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    step_s = statistics.median(gaps) if gaps else None
    if cfg.after_s is not None:
        limit = cfg.after_s
    elif not times:
        limit = cfg.first_step_s
    else:
        limit = max(cfg.floor_s, cfg.factor * step_s) if step_s is not None else max(cfg.floor_s, cfg.first_step_s)
    idle = max(0.0, now - last)
    return StallCheck(stalled=cfg.enabled and idle > limit, idle_s=idle, limit_s=limit, step_s=step_s)
