"""KL guard: a pure state machine that watches a run's KL and decides when to stop or restore it.

Feed it `(step, kl)` points in step order. While the KL stays above `threshold` for `patience`
consecutive steps it trips, and decides:
- "stop": cancel the run;
- "restore": go back to the newest checkpoint logged *before* the streak whose KL was within the
  threshold, and continue with a smaller learning rate (`lr_factor`) or a larger KL coefficient
  (`kl_coef_factor`); after `max_rollbacks` restores (or with no good checkpoint) it stops instead.

No Django, no I/O: the caller persists `GuardState.to_dict()` and acts on the decisions.
After a restore the old attempt may still log a few steps before it dies; those late points are
ignored until the new attempt logs a step at or before the one that tripped the guard.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

ACTIONS = ("stop", "restore")
NONE, STOP, RESTORE = "none", "stop", "restore"
WATCHING, RESTORING, STOPPED = "watching", "restoring", "stopped"


class GuardConfigError(ValueError):
    """A kl_guard block that cannot work; the message names the field."""


def _int(value: Any) -> int:
    f = float(value)
    if f != int(f):
        raise ValueError(f"{value!r} is not a whole number")
    return int(f)


@dataclass(frozen=True)
class GuardConfig:
    threshold: float = 0.1
    patience: int = 3  # consecutive steps above the threshold before acting
    action: str = "restore"  # "stop" | "restore"
    lr_factor: float | None = 0.5  # restore: new lr = lr * lr_factor
    kl_coef_factor: float | None = None  # restore: new kl_coef = kl_coef * kl_coef_factor
    max_rollbacks: int = 2
    enabled: bool = True
    metric: str = "actor/kl_loss"  # which logged series the caller feeds (the guard itself is agnostic)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> GuardConfig:
        """Build and validate a config from a job's `kl_guard` block (missing keys take defaults)."""
        raw = dict(raw or {})
        if "kl_factor" in raw:  # the launch form's name for kl_coef_factor
            raw.setdefault("kl_coef_factor", raw.pop("kl_factor"))
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise GuardConfigError(f"kl_guard has unknown keys {unknown}; known: {sorted(known)}")
        # lr_factor defaults to 0.5 only when no kl_coef_factor is given: they are alternatives.
        lr_default = None if raw.get("kl_coef_factor") is not None else cls.lr_factor
        lr_factor, kl_factor = raw.get("lr_factor", lr_default), raw.get("kl_coef_factor")
        try:
            cfg = cls(
                threshold=float(raw.get("threshold", cls.threshold)),
                patience=_int(raw.get("patience", cls.patience)),
                action=str(raw.get("action", cls.action)),
                lr_factor=None if lr_factor in (None, "") else float(lr_factor),
                kl_coef_factor=None if kl_factor in (None, "") else float(kl_factor),
                max_rollbacks=_int(raw.get("max_rollbacks", cls.max_rollbacks)),
                enabled=bool(raw.get("enabled", True)),
                metric=str(raw.get("metric") or cls.metric),
            )
        except (TypeError, ValueError) as exc:
            raise GuardConfigError(f"kl_guard values must be numbers: {exc}") from None
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if not (self.threshold > 0 and math.isfinite(self.threshold)):
            raise GuardConfigError(f"kl_guard.threshold must be > 0, got {self.threshold}")
        if self.patience < 1:
            raise GuardConfigError(f"kl_guard.patience must be >= 1, got {self.patience}")
        if self.action not in ACTIONS:
            raise GuardConfigError(f"kl_guard.action must be one of {ACTIONS}, not {self.action!r}")
        if self.max_rollbacks < 0:
            raise GuardConfigError(f"kl_guard.max_rollbacks must be >= 0, got {self.max_rollbacks}")
        if self.lr_factor is not None and not 0 < self.lr_factor < 1:
            raise GuardConfigError(f"kl_guard.lr_factor must be in (0, 1) (it shrinks the lr), got {self.lr_factor}")
        if self.kl_coef_factor is not None and not self.kl_coef_factor > 1:
            raise GuardConfigError(f"kl_guard.kl_coef_factor must be > 1 (it grows the KL coefficient), "
                                   f"got {self.kl_coef_factor}")
        if self.action == "restore" and self.lr_factor is None and self.kl_coef_factor is None:
            raise GuardConfigError("kl_guard.action 'restore' needs lr_factor or kl_coef_factor")


@dataclass
class GuardState:
    phase: str = WATCHING
    last_step: int | None = None  # last step fed while watching
    streak: list[list[float]] = field(default_factory=list)  # [[step, kl], ...] of the current streak
    rollbacks: int = 0
    restore_ceiling: int | None = None  # while restoring: the tripping step (late points above it are old)
    hp: dict[str, float] = field(default_factory=dict)  # hp overrides applied by earlier restores

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> GuardState:
        raw = dict(raw or {})
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        return cls(**known)


@dataclass(frozen=True)
class Decision:
    action: str  # "stop" | "restore"
    step: int  # the step that tripped the guard
    values: list[list[float]]  # the [step, kl] points of the streak that caused it
    reason: str
    to_step: int | None = None  # restore: the checkpoint step to resume from
    hp: dict[str, float] = field(default_factory=dict)  # restore: the new hyperparameters

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def restore_target(checkpoint_kl: Mapping[int, float | None], threshold: float, before: int) -> int | None:
    """The newest checkpoint step < `before` whose logged KL is known and within the threshold."""
    good = [s for s, kl in checkpoint_kl.items()
            if s < before and kl is not None and math.isfinite(kl) and kl <= threshold]
    return max(good) if good else None


def next_hp(cfg: GuardConfig, base_hp: Mapping[str, Any], applied: Mapping[str, float]) -> dict[str, float]:
    """The hyperparameters after one more restore, compounding on earlier restores."""
    current = {**{k: v for k, v in base_hp.items() if isinstance(v, (int, float))}, **applied}
    out: dict[str, float] = {}
    if cfg.lr_factor is not None:
        if "lr" not in current:
            raise GuardConfigError("kl_guard.lr_factor is set but the job has no hp.lr")
        out["lr"] = float(current["lr"]) * cfg.lr_factor
    if cfg.kl_coef_factor is not None:
        if "kl_coef" not in current:
            raise GuardConfigError("kl_guard.kl_coef_factor is set but the job has no hp.kl_coef")
        out["kl_coef"] = float(current["kl_coef"]) * cfg.kl_coef_factor
    return out


class KLGuard:
    """Feed points, get decisions; `state` is the part to persist between calls."""

    def __init__(self, cfg: GuardConfig, state: GuardState | None = None) -> None:
        cfg.validate()
        self.cfg = cfg
        self.state = state or GuardState()

    def feed(self, points: Iterable[tuple[int, float | None]], checkpoint_kl: Mapping[int, float | None],
             base_hp: Mapping[str, Any] | None = None) -> list[Decision]:
        """Consume (step, kl) points in order; return the decisions taken (at most one per trip).

        `checkpoint_kl` maps each available checkpoint step to the KL logged at that step
        (None when unknown); `base_hp` holds the job's current lr / kl_coef.
        """
        decisions: list[Decision] = []
        for step, kl in points:
            d = self._one(int(step), kl, checkpoint_kl, base_hp or {})
            if d is not None:
                decisions.append(d)
        return decisions

    def _one(self, step: int, kl: float | None, checkpoint_kl, base_hp) -> Decision | None:
        st, cfg = self.state, self.cfg
        if st.phase == STOPPED or not cfg.enabled:
            return None
        if st.phase == RESTORING:
            # Points above the tripping step come from the old attempt, still dying.
            if st.restore_ceiling is not None and step > st.restore_ceiling:
                return None
            st.phase, st.restore_ceiling, st.last_step, st.streak = WATCHING, None, step - 1, []
        if st.last_step is not None and step <= st.last_step:
            return None  # duplicate or out of order: already judged
        if kl is None or not math.isfinite(float(kl)):
            return None  # a missing value neither extends nor breaks a streak
        st.last_step = step
        kl = float(kl)
        if kl <= cfg.threshold:
            st.streak = []
            return None
        st.streak.append([step, kl])
        if len(st.streak) < cfg.patience:
            return None
        return self._trip(step, checkpoint_kl, base_hp)

    def _trip(self, step: int, checkpoint_kl, base_hp) -> Decision:
        st, cfg = self.state, self.cfg
        values, st.streak = st.streak, []
        head = (f"KL above {cfg.threshold:g} for {len(values)} consecutive steps "
                f"({values[0][0]:g}–{values[-1][0]:g}, max {max(v for _, v in values):.4g})")
        if cfg.action == STOP:
            st.phase = STOPPED
            return Decision(STOP, step, values, f"{head}: stopping the run")
        if st.rollbacks >= cfg.max_rollbacks:
            st.phase = STOPPED
            return Decision(STOP, step, values, f"{head}: already restored {st.rollbacks} time(s) "
                                                f"(max {cfg.max_rollbacks}), stopping the run")
        target = restore_target(checkpoint_kl, cfg.threshold, before=int(values[0][0]))
        if target is None:
            st.phase = STOPPED
            return Decision(STOP, step, values, f"{head}: no checkpoint before step {values[0][0]:g} has a KL "
                                                f"within the threshold, stopping the run")
        hp = next_hp(cfg, base_hp, st.hp)
        st.rollbacks += 1
        st.hp = {**st.hp, **hp}
        st.phase, st.restore_ceiling = RESTORING, step
        changes = ", ".join(f"{k}={v:.3g}" for k, v in hp.items())
        return Decision(RESTORE, step, values, f"{head}: restoring step {target} with {changes} "
                                               f"(rollback {st.rollbacks} of {cfg.max_rollbacks})",
                        to_step=target, hp=hp)
