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


# -- automatic judges: wins / ties / losses, swapped-order consistency, bootstrap interval -----------

@dataclass(frozen=True)
class Counts:
    wins: int
    ties: int
    losses: int

    @property
    def n(self) -> int:
        return self.wins + self.ties + self.losses


def counts(outcomes: Iterable[float | None]) -> Counts:
    """Wins, ties and losses of the non-missing outcomes (1, 0.5, 0), kept apart."""
    vals = [o for o in outcomes if o is not None]
    return Counts(sum(1 for o in vals if o == WIN), sum(1 for o in vals if o == TIE),
                  sum(1 for o in vals if o == LOSS))


def swap_consistent(first: float | None, second: float | None) -> tuple[float | None, bool | None]:
    """One pair judged twice, positions swapped; both outcomes are from the policy's side.

    Returns (outcome, consistent): the same verdict twice counts as that verdict; two different
    verdicts (the judge followed the position, not the content) count as a tie and are inconsistent.
    A missing verdict in either order leaves the pair unjudged: (None, None).
    """
    if first is None or second is None:
        return None, None
    if first == second:
        return first, True
    return TIE, False


def bootstrap_interval(outcomes: Iterable[float | None], *, resamples: int = 1000, seed: int = 0,
                       level: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean outcome: `resamples` resamples with replacement,
    seeded (the same outcomes and seed give the same interval). (None, None) without outcomes."""
    import random

    vals = [o for o in outcomes if o is not None]
    if not vals:
        return None, None
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    rng, n = random.Random(seed), len(vals)
    means = sorted(sum(rng.choices(vals, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    lo = means[max(0, math.floor(tail * resamples))]
    hi = means[min(resamples - 1, math.ceil((1 - tail) * resamples) - 1)]
    return lo, hi


@dataclass(frozen=True)
class JudgedSummary:
    """A judge's result over pairs judged in both orders."""

    counts: Counts
    rate: float | None
    lo: float | None
    hi: float | None
    judged: int  # pairs with a verdict in both orders
    inconsistent: int  # of those, pairs whose two verdicts differ (counted as ties)
    unjudged: int  # pairs missing a verdict in either order (an unparsable answer, a scorer error)
    first_position: int  # inconsistent pairs where the judge chose whichever response was shown first

    @property
    def position_bias_share(self) -> float | None:
        """Share of judged pairs whose verdict flipped with the positions."""
        return self.inconsistent / self.judged if self.judged else None


def summarize_swapped(pairs: Iterable[tuple[float | None, float | None]], *, resamples: int = 1000,
                      seed: int = 0, level: float = 0.95) -> JudgedSummary:
    """pairs: (outcome with the policy shown first, outcome with the policy shown second), policy's side."""
    outcomes, inconsistent, unjudged, first_position = [], 0, 0, 0
    for first, second in pairs:
        out, consistent = swap_consistent(first, second)
        if out is None:
            unjudged += 1
            continue
        outcomes.append(out)
        if not consistent:
            inconsistent += 1
            # policy shown first won the first order and lost the second: the first position won twice
            if (first, second) == (WIN, LOSS):
                first_position += 1
    c = counts(outcomes)
    lo, hi = bootstrap_interval(outcomes, resamples=resamples, seed=seed, level=level)
    rate = win_rate(outcomes)
    return JudgedSummary(c, rate, lo, hi, len(outcomes), inconsistent, unjudged, first_position)
