"""Run-health rules: a pure engine that watches logged metrics and decides to warn, stop, restore or branch.

A rule reads one metric (a logged name, or a pattern such as "val-core/*/win_rate" whose matches at a
step are averaged) and trips when its condition holds for `patience` consecutive evaluated steps:
- "above" / "below": the value is above / below `threshold`;
- "drop": the value fell by more than `threshold` (a fraction, 0.5 = half) from its warm-up baseline,
  the mean of the values logged at steps <= `warmup`;
- "spike": the value is more than `threshold` standard deviations above the mean of the previous
  `window` values;
- "diverge": at each step where `versus` is logged (validation), `versus` fell by more than
  `threshold` over its last `window` values while `metric` rose over the same steps (reward up,
  validation win rate down: reward hacking).
Steps <= `warmup` are never judged. Actions: "warn" (an event, the run goes on), "stop", "restore"
(go back to the newest checkpoint before the streak at which every rule held, with lr *= lr_factor and
kl_coef *= kl_coef_factor, at most `max_restores` times, then stop) and "branch" (start a child run
from that checkpoint with those settings while this run continues, at most `max_restores` times,
then warn).

No Django, no I/O: the caller persists `EngineState.to_dict()` and acts on the decisions. After a
restore the old attempt may log a few more steps; they are ignored until the new attempt logs a step
at or before the one that tripped.
"""
from __future__ import annotations

import fnmatch
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from training.guard_builtins import BUILTIN, KL_RULE, METRIC_SOURCES, THRESHOLD_RANGE

__all__ = ["BUILTIN", "KL_RULE", "METRIC_SOURCES", "THRESHOLD_RANGE"]  # the built-in rules' table, re-exported

CONDITIONS = ("above", "below", "drop", "spike", "diverge")
ACTIONS = ("warn", "stop", "restore", "branch")
WARN, STOP, RESTORE, BRANCH = ACTIONS
WATCHING, RESTORING, STOPPED = "watching", "restoring", "stopped"
OK, WARMING_UP, TRIPPED = "ok", "warming_up", "tripped"
_HISTORY = 200  # values kept per rule for spike / diverge windows
_BAD_STEPS = 2000  # steps at which some rule's condition held, kept to judge checkpoints
SEED_LIMIT = 2**31  # hp.seed's range


class RuleConfigError(ValueError):
    """A rule that cannot work; the message names the rule and the field."""


@dataclass(frozen=True)
class Rule:
    name: str
    metric: str
    condition: str
    threshold: float
    warmup: int = 0  # steps <= warmup are not judged (and form the "drop" baseline)
    window: int = 10  # spike: values in the mean/std; diverge: validation points compared
    patience: int = 1  # consecutive violating evaluations before acting
    action: str = WARN
    lr_factor: float | None = None
    kl_coef_factor: float | None = None
    max_restores: int = 2
    new_seed: bool = False  # restore / branch: with the next seed (other rollouts, same data)
    versus: str | None = None  # diverge: the metric that must not fall
    enabled: bool = True

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Rule:
        """A rule from its declaration: {"rule": "<built-in>", ...overrides} or a full custom rule with a name."""
        if not isinstance(raw, Mapping):
            raise RuleConfigError(f"a guard rule must be a mapping, got {type(raw).__name__}")
        raw = dict(raw)
        builtin = raw.pop("rule", None)
        if builtin is not None:
            if builtin not in BUILTIN:
                raise RuleConfigError(f"unknown built-in rule {builtin!r}; known: {sorted(BUILTIN)}")
            raw = {**BUILTIN[builtin], "name": builtin, **raw}
        name = str(raw.get("name") or "").strip()
        if not name:
            raise RuleConfigError("a custom guard rule needs a name (or 'rule': one of the built-in rules)")
        unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
        if unknown:
            raise RuleConfigError(f"rule {name!r} has unknown keys {unknown}")
        for key in ("metric", "condition", "threshold"):
            if raw.get(key) in (None, ""):
                raise RuleConfigError(f"rule {name!r} needs {key!r}")
        if raw.get("action", WARN) in (RESTORE, BRANCH) and raw.get("lr_factor") is None \
                and raw.get("kl_coef_factor") is None and not _bool(raw.get("new_seed", False)):
            raw["lr_factor"] = 0.5  # a restore changes something by default: half the learning rate
        try:
            rule = cls(
                name=name, metric=str(raw["metric"]), condition=str(raw["condition"]),
                threshold=float(raw["threshold"]), warmup=_int(raw.get("warmup", 0)),
                window=_int(raw.get("window", 10)), patience=_int(raw.get("patience", 1)),
                action=str(raw.get("action", WARN)),
                lr_factor=None if raw.get("lr_factor") in (None, "") else float(raw["lr_factor"]),
                kl_coef_factor=None if raw.get("kl_coef_factor") in (None, "") else float(raw["kl_coef_factor"]),
                max_restores=_int(raw.get("max_restores", 2)), new_seed=_bool(raw.get("new_seed", False)),
                versus=None if raw.get("versus") in (None, "") else str(raw["versus"]),
                enabled=bool(raw.get("enabled", True)),
            )
        except (TypeError, ValueError) as exc:
            raise RuleConfigError(f"rule {name!r}: values must be numbers: {exc}") from None
        rule.validate()
        if builtin is not None and not THRESHOLD_RANGE[builtin][0] < rule.threshold <= THRESHOLD_RANGE[builtin][1]:
            low, high = THRESHOLD_RANGE[builtin]
            raise RuleConfigError(f"rule {name!r}: the threshold must be above {low:g} and at most {high:g}, "
                                  f"got {rule.threshold:g}")
        return rule

    def validate(self) -> None:
        def bad(msg: str) -> RuleConfigError:
            return RuleConfigError(f"rule {self.name!r}: {msg}")

        if self.condition not in CONDITIONS:
            raise bad(f"condition must be one of {CONDITIONS}, not {self.condition!r}")
        if self.action not in ACTIONS:
            raise bad(f"action must be one of {ACTIONS}, not {self.action!r}")
        if not math.isfinite(self.threshold):
            raise bad("threshold must be a finite number")
        if self.condition == "drop" and not 0 < self.threshold < 1:
            raise bad(f"a drop threshold is a fraction in (0, 1), got {self.threshold:g}")
        if self.condition in ("spike", "diverge") and self.threshold <= 0:
            raise bad(f"a {self.condition} threshold must be > 0, got {self.threshold:g}")
        if self.condition in ("spike", "diverge") and self.window < 2:
            raise bad(f"a {self.condition} window must be >= 2, got {self.window}")
        if self.condition == "diverge" and not self.versus:
            raise bad("a diverge rule needs 'versus' (the metric that must not fall)")
        if self.warmup < 0 or self.patience < 1 or self.max_restores < 0 or self.window > _HISTORY:
            raise bad(f"need warmup >= 0, patience >= 1, max_restores >= 0 and window <= {_HISTORY}")
        if self.lr_factor is not None and not 0 < self.lr_factor < 1:
            raise bad(f"lr_factor must be in (0, 1) (it shrinks the lr), got {self.lr_factor:g}")
        if self.kl_coef_factor is not None and not 1 < self.kl_coef_factor <= 100:
            raise bad(f"kl_coef_factor must be above 1 (it grows the KL coefficient) and at most 100, "
                      f"got {self.kl_coef_factor:g}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def kl_rule(raw: Sequence[Mapping[str, Any]] | None) -> Rule | None:
    """The rule that guards the KL (the built-in "kl", else any rule on its metric with "above"), on or off;
    None when there is none or the declaration is invalid."""
    try:
        rules = parse_rules(raw)
    except RuleConfigError:
        return None
    kl = [r for r in rules if r.metric == BUILTIN[KL_RULE]["metric"] and r.condition == "above"]
    return next((r for r in kl if r.name == KL_RULE), kl[0] if kl else None)


def describe(rule: Rule) -> str:
    """One line for people: what the rule watches and what it does."""
    when = {
        "above": f"above {rule.threshold:g}", "below": f"below {rule.threshold:g}",
        "drop": f"down {rule.threshold:.0%} from its first {rule.warmup} steps",
        "spike": f"{rule.threshold:g} standard deviations above its last {rule.window} values",
        "diverge": f"rising while {rule.versus} falls by {rule.threshold:g} over {rule.window} validations",
    }[rule.condition]
    if rule.patience > 1:
        when += f" for {rule.patience} steps"
    act = rule.action
    if rule.action in (RESTORE, BRANCH):
        changes = [f"lr × {rule.lr_factor:g}"] if rule.lr_factor is not None else []
        changes += [f"KL coefficient × {rule.kl_coef_factor:g}"] if rule.kl_coef_factor is not None else []
        changes += ["new seed"] if rule.new_seed else []
        act += f" ({', '.join(changes + [f'at most {rule.max_restores}×'])})"
    return f"{rule.metric} {when} → {act}"


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _int(value: Any) -> int:
    f = float(value)
    if f != int(f):
        raise ValueError(f"{value!r} is not a whole number")
    return int(f)


def parse_rules(raw: Sequence[Mapping[str, Any]] | None) -> list[Rule]:
    """The rules declared for a job (a list); names must be unique."""
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple)):
        raise RuleConfigError("guard_rules must be a list of rules")
    rules = [Rule.from_dict(r) for r in raw]
    names = [r.name for r in rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RuleConfigError(f"guard rule names must be unique: {dupes}")
    return rules


@dataclass
class RuleState:
    status: str = WARMING_UP
    streak: list[list[float]] = field(default_factory=list)  # [[step, value], ...]
    baseline: list[float] = field(default_factory=list)  # drop: the warm-up values
    history: list[list[float]] = field(default_factory=list)  # [[step, value], ...] of the metric
    versus: list[list[float]] = field(default_factory=list)  # diverge: [[step, value], ...] of `versus`
    trips: int = 0
    restores: int = 0  # restores or branches taken
    last: list[float] | None = None  # [step, value] last judged


@dataclass
class EngineState:
    phase: str = WATCHING
    last_step: int | None = None
    restore_ceiling: int | None = None
    hp: dict[str, float] = field(default_factory=dict)  # overrides applied by earlier restores
    bad_steps: list[int] = field(default_factory=list)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> RuleState as a dict

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> EngineState:
        raw = dict(raw or {})
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})

    def rule(self, name: str) -> RuleState:
        raw = self.rules.get(name) or {}
        return RuleState(**{k: raw[k] for k in RuleState.__dataclass_fields__ if k in raw})


@dataclass(frozen=True)
class Decision:
    rule: str
    action: str  # warn | stop | restore | branch
    step: int
    metric: str
    values: list[list[float]]
    reason: str
    to_step: int | None = None
    hp: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def metric_value(rule_metric: str, at_step: Mapping[str, float]) -> float | None:
    """The rule's metric at one step: the exact name, or the mean of the names matching a pattern."""
    if rule_metric in at_step:
        return at_step[rule_metric]
    if not any(c in rule_metric for c in "*?["):
        return None
    vals = [v for k, v in at_step.items() if fnmatch.fnmatchcase(k, rule_metric)]
    return sum(vals) / len(vals) if vals else None


def next_hp(rule: Rule, base_hp: Mapping[str, Any], applied: Mapping[str, float]) -> dict[str, float]:
    """The hyperparameters after one more restore, compounding on earlier restores."""
    current = {**{k: v for k, v in base_hp.items() if isinstance(v, (int, float))}, **applied}
    out: dict[str, float] = {}
    for key, factor in (("lr", rule.lr_factor), ("kl_coef", rule.kl_coef_factor)):
        if factor is not None:
            if key not in current:
                raise RuleConfigError(f"rule {rule.name!r} changes {key} but the job has no hp.{key}")
            out[key] = float(current[key]) * factor
    if rule.new_seed:
        out["seed"] = (int(current.get("seed", 0)) + 1) % SEED_LIMIT
    return out


class RuleEngine:
    """Feed (step, name, value) points; get decisions. `state` is the part to persist between calls."""

    def __init__(self, rules: Iterable[Rule], state: EngineState | None = None) -> None:
        self.rules = [r for r in rules if r.enabled]
        self.state = state or EngineState()

    def feed(self, points: Iterable[tuple[int, str, Any]], checkpoint_steps: Iterable[int] = (),
             base_hp: Mapping[str, Any] | None = None) -> list[Decision]:
        by_step: dict[int, dict[str, float]] = {}
        for step, name, value in points:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                by_step.setdefault(int(step), {})[str(name)] = float(value)
        ckpts = sorted({int(s) for s in checkpoint_steps})
        out: list[Decision] = []
        for step in sorted(by_step):
            out += self._step(step, by_step[step], ckpts, base_hp or {})
        return out

    def statuses(self) -> list[dict[str, Any]]:
        """Each rule's state for display: name, metric, condition, action, status, trips, last [step, value]."""
        out = []
        for r in self.rules:
            rs = self.state.rule(r.name)
            out.append({**r.to_dict(), "status": rs.status, "trips": rs.trips, "restores": rs.restores,
                        "last": rs.last, "summary": describe(r)})
        return out

    def good_checkpoint(self, checkpoint_steps: Iterable[int], before: int | None = None) -> int | None:
        """The newest checkpoint (before `before`) at which every rule held: where a restore goes back to."""
        bad = set(self.state.bad_steps)
        good = [s for s in checkpoint_steps if (before is None or s < before) and s not in bad]
        return max(good) if good else None

    def _step(self, step: int, values: Mapping[str, float], ckpts: list[int], base_hp) -> list[Decision]:
        st = self.state
        if st.phase == STOPPED:
            return []
        if st.phase == RESTORING:
            if st.restore_ceiling is not None and step > st.restore_ceiling:
                return []  # the old attempt, still dying
            st.phase, st.restore_ceiling, st.last_step = WATCHING, None, step - 1
            st.bad_steps = [s for s in st.bad_steps if s < step]
            for r in self.rules:
                rs = st.rule(r.name)
                rs.streak = []
                rs.history = [p for p in rs.history if p[0] < step]
                rs.versus = [p for p in rs.versus if p[0] < step]
                rs.status = OK if rs.status == TRIPPED else rs.status
                st.rules[r.name] = asdict(rs)
        if st.last_step is not None and step <= st.last_step:
            return []  # duplicate or out of order: already judged
        st.last_step = step
        decisions: list[Decision] = []
        acted = False
        for r in self.rules:
            rs = st.rule(r.name)
            d = self._judge(r, rs, step, values)
            st.rules[r.name] = asdict(rs)
            if d is None:
                continue
            if d.action != WARN and acted:  # one run-changing action per step; the rest become warnings
                d = replace(d, action=WARN, reason=d.reason + " (another rule already acted at this step)")
            elif d.action != WARN:
                d = self._act(r, d, ckpts, base_hp)
                acted = d.action != WARN
            decisions.append(d)
            if st.phase != WATCHING:
                break
        return decisions

    def _judge(self, r: Rule, rs: RuleState, step: int, values: Mapping[str, float]) -> Decision | None:
        value = metric_value(r.metric, values)
        if r.condition == "diverge":
            if value is not None:
                rs.history = (rs.history + [[step, value]])[-_HISTORY:]
            value = metric_value(r.versus or "", values)  # judged when validation is logged
            if value is None:
                return None
        if value is None:
            return None
        violating = self._violates(r, rs, step, value)
        rs.last = [step, value]
        if violating is None:
            rs.status, rs.streak = WARMING_UP, []
            return None
        if not violating:
            rs.status, rs.streak = OK, []
            return None
        self._mark_bad(step)
        rs.streak.append([step, value])
        if len(rs.streak) < r.patience:
            return None
        values_, rs.streak = rs.streak, []
        rs.status, rs.trips = TRIPPED, rs.trips + 1
        return Decision(r.name, r.action, step, r.metric, values_, self._describe(r, rs, values_))

    def _violates(self, r: Rule, rs: RuleState, step: int, value: float) -> bool | None:
        """True / False, or None while warming up."""
        if r.condition == "spike":
            prev = [v for _s, v in rs.history[-r.window:]]
            rs.history = (rs.history + [[step, value]])[-_HISTORY:]
            if step <= r.warmup or len(prev) < r.window:
                return None
            mean, sd = statistics.fmean(prev), statistics.pstdev(prev)
            return (value - mean) / max(sd, 1e-8 * max(1.0, abs(mean))) > r.threshold
        if r.condition == "diverge":
            rs.versus = (rs.versus + [[step, value]])[-_HISTORY:]
            if step <= r.warmup or len(rs.versus) < r.window:
                return None
            first = rs.versus[-r.window]
            span = [v for s, v in rs.history if first[0] <= s <= step]
            if len(span) < 2:
                return None
            half = len(span) // 2
            rising = statistics.fmean(span[half:]) > statistics.fmean(span[:half])
            return rising and first[1] - value > r.threshold
        if step <= r.warmup:
            if r.condition == "drop":
                rs.baseline.append(value)
            return None
        if r.condition == "above":
            return value > r.threshold
        if r.condition == "below":
            return value < r.threshold
        if not rs.baseline:  # drop without a warm-up: the first value is the baseline
            rs.baseline.append(value)
            return None
        base = statistics.fmean(rs.baseline)
        return value < base - abs(base) * r.threshold

    def _describe(self, r: Rule, rs: RuleState, values: list[list[float]]) -> str:
        span = f"step {values[0][0]:g}" if len(values) == 1 else f"steps {values[0][0]:g}–{values[-1][0]:g}"
        last = values[-1][1]
        what = {
            "above": f"{r.metric} above {r.threshold:g}",
            "below": f"{r.metric} below {r.threshold:g}",
            "drop": (f"{r.metric} down more than {r.threshold:.0%} from its warm-up baseline "
                     f"{statistics.fmean(rs.baseline) if rs.baseline else float('nan'):.4g}"),
            "spike": f"{r.metric} more than {r.threshold:g} standard deviations above its last {r.window} values",
            "diverge": f"{r.metric} rising while {r.versus} fell more than {r.threshold:g}",
        }[r.condition]
        return f"{r.name}: {what} ({span}, last {last:.4g})"

    def _act(self, r: Rule, d: Decision, ckpts: list[int], base_hp) -> Decision:
        st, rs = self.state, self.state.rule(r.name)
        if d.action == STOP:
            st.phase = STOPPED
            return replace(d, reason=f"{d.reason}: stopping the run")
        fallback = STOP if d.action == RESTORE else WARN
        then = "stopping the run" if fallback == STOP else "warning only"
        verb = "restored" if d.action == RESTORE else "branched"
        if rs.restores >= r.max_restores:
            if fallback == STOP:
                st.phase = STOPPED
            return replace(d, action=fallback, reason=f"{d.reason}: already {verb} {rs.restores} time(s) "
                                                      f"(max {r.max_restores}), {then}")
        start = int(d.values[0][0])
        target = self.good_checkpoint(ckpts, before=start)
        if target is None:
            if fallback == STOP:
                st.phase = STOPPED
            return replace(d, action=fallback, reason=f"{d.reason}: no checkpoint before step {start} where every "
                                                      f"rule held, {then}")
        applied = st.hp if d.action == RESTORE else {}
        hp = next_hp(r, base_hp, applied)
        rs.restores += 1
        st.rules[r.name] = asdict(rs)
        changes = ", ".join(f"{k}={v}" if k == "seed" else f"{k}={v:.3g}" for k, v in hp.items()) \
            or "the same settings"
        if d.action == RESTORE:
            st.hp = {**st.hp, **hp}
            st.phase, st.restore_ceiling = RESTORING, d.step
            return replace(d, to_step=target, hp=hp, reason=f"{d.reason}: restoring step {target} with {changes} "
                                                             f"(restore {rs.restores} of {r.max_restores})")
        return replace(d, to_step=target, hp=hp, reason=f"{d.reason}: branching a child run from step {target} "
                                                         f"with {changes} (branch {rs.restores} of {r.max_restores})")

    def _mark_bad(self, step: int) -> None:
        if not self.state.bad_steps or self.state.bad_steps[-1] != step:
            self.state.bad_steps = (self.state.bad_steps + [step])[-_BAD_STEPS:]
