"""Win-rate maths for validation: policy response vs a reference, judged by the same scorer.

Pure functions, no torch. The tie rule (stated wherever a win rate is shown, see TIE_RULE): a win
counts 1, a tie ½ and a loss 0, so the win rate is the mean outcome; the 95% interval is Wilson's
score interval on that (possibly fractional) count. Because "both wrong" is a tie, the rate alone
hides how often the policy actually won: every summary also carries the wins, ties and losses, the
decisive win share (wins / (wins + losses), ties left out) with its own interval, and the sentence
that says when too few samples make the interval too wide to read (`precision_note`). Accuracy
(`accuracy`) is the share of policy answers scoring correct against a ground truth.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

WIN, TIE, LOSS = 1.0, 0.5, 0.0
TIE_RULE = "a tie counts as half a win (win rate = (wins + ½ ties) / judged)"
# Below this many judged pairs, or with a 95% interval wider than ± this, the page says the rate is unreliable.
WIDE_N = 30
WIDE_HALF_WIDTH = 0.15
# A reward at or above this is a correct answer (exact-match rewards give 1.0 for the right answer).
CORRECT_SCORE = 1.0


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


def classify(value: float | None) -> str | None:
    """"win", "tie" or "loss" for an outcome (a reviewers' average above ½ is a win); None when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if abs(value - TIE) < 1e-9:
        return "tie"
    return "win" if value > TIE else "loss"


def count_outcomes(outcomes: Iterable[float | None]) -> tuple[int, int, int]:
    """(wins, ties, losses) among the non-missing outcomes."""
    counts = {"win": 0, "tie": 0, "loss": 0}
    for o in outcomes:
        kind = classify(o)
        if kind is not None:
            counts[kind] += 1
    return counts["win"], counts["tie"], counts["loss"]


@dataclass(frozen=True)
class WinRateSummary:
    rate: float | None
    lo: float | None
    hi: float | None
    n: int
    wins: int = 0
    ties: int = 0
    losses: int = 0

    @property
    def decisive(self) -> int:
        """Pairs that were not a tie."""
        return self.wins + self.losses

    @property
    def decisive_share(self) -> float | None:
        """Wins / (wins + losses): the win share with ties left out; None when every pair tied."""
        return self.wins / self.decisive if self.decisive else None

    @property
    def decisive_interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.wins, self.decisive) if self.decisive else None

    def share(self, kind: str) -> float | None:
        """The share of judged pairs that were wins / ties / losses."""
        return getattr(self, {"win": "wins", "tie": "ties", "loss": "losses"}[kind]) / self.n if self.n else None

    @property
    def wide(self) -> bool:
        return is_wide(self.n, self.lo, self.hi)

    @property
    def note(self) -> str:
        return precision_note(self.n, self.lo, self.hi)

    @property
    def decisive_text(self) -> str:
        return decisive_text(self.wins, self.ties, self.losses)

    def to_dict(self) -> dict:
        """The API's shape of every win rate: counts beside the rate, and whether it is too wide to read."""
        return {"wins": self.wins, "ties": self.ties, "losses": self.losses, "n": self.n, "win_rate": self.rate,
                "lo": self.lo, "hi": self.hi, "too_few": self.wide, "note": self.note,
                "without_ties": self.decisive_text}


def decisive_text(wins: int, ties: int, losses: int) -> str:
    """What the rate is with the ties set aside, in words ("" when there were no ties to set aside)."""
    if not ties:
        return ""
    decisive = wins + losses
    if not decisive:
        return f"All {ties} pairs were ties: none had a winner." if ties > 1 else "The only pair was a tie."
    pairs = "pair" if decisive == 1 else "pairs"
    return (f"Setting the {ties} tie{'s' if ties != 1 else ''} aside: won {wins} of the {decisive} {pairs} "
            f"that had a winner ({wins / decisive:.0%}).")


def summarize(outcomes: Iterable[float | None], z: float = 1.96) -> WinRateSummary:
    """Win rate (ties ½), Wilson interval, count, and wins / ties / losses of the non-missing outcomes.

    Fractional outcomes (several reviewers averaged) count in the rate as they are and in the
    wins / ties / losses by which side of ½ they fall."""
    vals = [o for o in outcomes if o is not None and not (isinstance(o, float) and math.isnan(o))]
    if not vals:
        return WinRateSummary(None, None, None, 0)
    lo, hi = wilson_interval(sum(vals), len(vals), z)
    wins, ties, losses = count_outcomes(vals)
    return WinRateSummary(sum(vals) / len(vals), lo, hi, len(vals), wins, ties, losses)


def is_wide(n: int, lo: float | None, hi: float | None) -> bool:
    """Too few samples to read the rate: n below WIDE_N, or a 95% interval wider than ± WIDE_HALF_WIDTH."""
    if n <= 0:
        return True
    if n < WIDE_N:
        return True
    return lo is not None and hi is not None and (hi - lo) / 2 > WIDE_HALF_WIDTH


def precision_note(n: int, lo: float | None, hi: float | None) -> str:
    """The sentence shown beside a win rate when its interval is too wide to trust ("" when it is not)."""
    if n <= 0:
        return "No judged pairs yet."
    if not is_wide(n, lo, hi):
        return ""
    span = "" if lo is None or hi is None else f"; the true rate could be anywhere from {lo:.0%} to {hi:.0%}"
    few = f"only {n} judged pair{'s' if n != 1 else ''}" if n < WIDE_N else f"{n} judged pairs"
    return f"Too few samples to trust this rate: {few}{span}."


def is_correct(score: float | None, acc: float | bool | None = None) -> bool | None:
    """A policy answer's correctness: the reward's own `acc` when it gives one, else score ≥ CORRECT_SCORE."""
    if isinstance(acc, bool):
        return acc
    if isinstance(acc, (int, float)) and not math.isnan(acc):
        return acc >= CORRECT_SCORE
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return None
    return score >= CORRECT_SCORE


def accuracy(rows: Iterable[dict]) -> tuple[float | None, int]:
    """(share correct, n) over the sample rows that have a ground truth ("gts") and a score."""
    judged = []
    for row in rows:
        if row.get("gts") in (None, ""):
            continue
        ok = is_correct(row.get("score"), row.get("acc") if "acc" in row else None)
        if ok is not None:
            judged.append(ok)
    return (sum(judged) / len(judged) if judged else None), len(judged)


def metric_names(source: str) -> dict[str, str]:
    """The logged names of one data source's validation win-rate series (both backends use these)."""
    base = f"val-core/{source}/win_rate"
    return {"rate": base, "lo": f"{base}_lo", "hi": f"{base}_hi", "n": f"{base}_n", "wins": f"{base}_wins",
            "ties": f"{base}_ties", "losses": f"{base}_losses", "accuracy": f"val-core/{source}/accuracy",
            "accuracy_n": f"val-core/{source}/accuracy_n"}


def validation_metrics(rows: Iterable[dict]) -> dict[str, float]:
    """Per-data-source win rate, its interval, wins / ties / losses and accuracy of validation sample rows.

    Rows are samples/val dumps ({"score", "gts", "win", "data_source"?, "acc"?}); a row's `win` is its
    outcome (1 / ½ / 0; null or NaN when there was no reference). Sources without any outcome get no
    win-rate series, sources without a ground truth no accuracy."""
    by_source: dict[str, list[dict]] = {}
    for row in rows:
        by_source.setdefault(str(row.get("data_source") or "default"), []).append(row)
    out: dict[str, float] = {}
    for source, group in sorted(by_source.items()):
        names = metric_names(source)
        summary = summarize(_outcome_of(r) for r in group)
        if summary.n:
            out.update({names["rate"]: summary.rate, names["lo"]: summary.lo, names["hi"]: summary.hi,
                        names["n"]: summary.n, names["wins"]: summary.wins, names["ties"]: summary.ties,
                        names["losses"]: summary.losses})  # type: ignore[dict-item]
        acc, n_acc = accuracy(group)
        if acc is not None:
            out[names["accuracy"]], out[names["accuracy_n"]] = acc, n_acc
    return out


def _outcome_of(row: dict) -> float | None:
    win = row.get("win")
    if isinstance(win, bool) or not isinstance(win, (int, float)) or math.isnan(win):
        return None
    return float(win)


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
