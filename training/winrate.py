"""Win-rate maths for validation: policy response vs a reference, judged by the same scorer.

Pure functions, no torch: a win counts 1, a tie 0.5 and a loss 0, so the win rate is the
mean outcome; the 95% interval is Wilson's score interval on that (possibly fractional) count.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

WIN, TIE, LOSS = 1.0, 0.5, 0.0


def outcome(score: float | None, reference_score: float | None, tie_tolerance: float = 1e-6) -> float | None:
    """Return 1.0 (win), 0.5 (tie) or 0.0 (loss); None when either score is missing."""
    if score is None or reference_score is None:
        return None
    if math.isnan(score) or math.isnan(reference_score):
        return None
    diff = score - reference_score
    if abs(diff) <= tie_tolerance:
        return TIE
    return WIN if diff > 0 else LOSS


def win_rate(outcomes: Iterable[float | None]) -> float | None:
    """Mean of the non-missing outcomes; None when there are none."""
    vals = [o for o in outcomes if o is not None]
    return sum(vals) / len(vals) if vals else None


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for `successes` out of `n` (ties may make successes fractional)."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n], got {successes} of {n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class WinRateSummary:
    rate: float | None
    lo: float | None
    hi: float | None
    n: int


def summarize(outcomes: Iterable[float | None], z: float = 1.96) -> WinRateSummary:
    """Win rate, Wilson interval and count of the non-missing outcomes."""
    vals = [o for o in outcomes if o is not None]
    if not vals:
        return WinRateSummary(None, None, None, 0)
    lo, hi = wilson_interval(sum(vals), len(vals), z)
    return WinRateSummary(sum(vals) / len(vals), lo, hi, len(vals))
