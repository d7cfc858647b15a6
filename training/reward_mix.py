"""The reward mix: component scores -> weighted sum -> shaping, with the per-component results.

The one definition of how a job's reward components become one reward, used wherever a reward is
computed: the local backend (`training.reward_client`), VERL's reward workers
(`training.backends.verl_reward`) and test-runs in the web app (`webapp.rewards.scoring`).

Shaping of the weighted sum `s`:
- "raw": `s` as is;
- "binary": 1.0 if `s >= 0.5` else 0.0;
- "normalized": `tanh(s)`, which squashes any real score into (-1, 1), is monotonic (so it keeps
  rankings and win/loss outcomes) and is close to the identity near 0.
A component that failed on an item (no score, or not a finite number) contributes 0; its error is kept.

Pure and standard library only.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

SHAPINGS = ("binary", "normalized", "raw")
SHAPING_LABELS = {
    "binary": "Binary: 1 if the weighted score is at least 0.5, else 0",
    "normalized": "Normalized to [-1, 1] (tanh of the weighted score)",
    "raw": "Raw weighted score",
}


class RewardMixError(ValueError):
    """A mix that cannot be computed (unknown shaping, a weight per score missing)."""


@dataclass(frozen=True)
class Mixed:
    """One item's reward: `score` (shaped), `raw` (the weighted sum) and each component's own result."""

    score: float
    raw: float
    components: list[float | None]
    errors: list[str] = field(default_factory=list)

    @property
    def error(self) -> str | None:
        return "; ".join(self.errors) or None


def check_shaping(shaping: str) -> str:
    if shaping not in SHAPINGS:
        raise RewardMixError(f"reward.shaping must be one of {SHAPINGS}, not {shaping!r}")
    return shaping


def shape(raw: float, shaping: str) -> float:
    """Apply the job's shaping to a weighted-sum score."""
    if check_shaping(shaping) == "binary":
        return 1.0 if raw >= 0.5 else 0.0
    if shaping == "normalized":
        return math.tanh(raw)
    return raw


def usable(score: float | None) -> bool:
    return score is not None and not isinstance(score, bool) and math.isfinite(score)


def mix(scores: Sequence[float | None], weights: Sequence[float], shaping: str,
        errors: Sequence[str | None] = (), names: Sequence[str] = ()) -> Mixed:
    """Mix one item's component scores: the weighted sum of the usable ones, then the shaping.

    `errors[i]` (optional) is component i's error on this item; it is reported as `names[i]: error`.
    """
    if len(scores) != len(weights):
        raise RewardMixError(f"{len(scores)} component scores but {len(weights)} weights")
    raw = float(sum(w * s for w, s in zip(weights, scores, strict=True) if usable(s)))
    reported = [f"{names[i]}: {e}" if i < len(names) else str(e) for i, e in enumerate(errors) if e]
    return Mixed(shape(raw, shaping), raw, list(scores), reported)


def component_names(components: Sequence[dict]) -> list[str]:
    """Each component's name in metrics, dumps and errors, the same on every backend: a function is named
    by its file's stem (reward/exact_match_v3.py -> exact_match_v3), a model by its `name` (else
    "reward_model"); a repeated name gets _2, _3, ..."""
    taken: set[str] = set()
    out = []
    for i, comp in enumerate(components):
        kind = comp.get("type")
        base = comp.get("name") if kind == "model" else None
        base = base or (PurePath(str(comp.get("path") or "")).stem if kind == "function" else "reward_model")
        base = base or f"component{i}"
        name, n = base, 2
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name)
        out.append(name)
    return out
