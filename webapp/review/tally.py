"""Pure bookkeeping of the review: how a choice resolves to a verdict, how verdicts make a row's state,
and what a row contributes to the version's counters.

Counters are kept by difference: when a row changes, the services compute contribution(new) minus
contribution(old) and add that to the stored counters, so no page ever recounts a million rows.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

LABELS = ("approve", "swap", "reject", "flag")
CHOICES = ("left", "right", "approve", "swap", "reject", "flag")
STATE_OF_LABEL = {"approve": "approved", "swap": "approved", "reject": "rejected", "flag": "flagged"}
MANUAL_SOURCES = ("admin", "bulk")


def resolve_choice(choice: str, left_is_chosen: bool) -> tuple[str, bool]:
    """Return (decision, swap) for a reviewer's choice.

    "left"/"right" say which displayed response is better; the dataset's chosen response sits on the
    left when `left_is_chosen`. Preferring the chosen one approves the pair as is, preferring the
    rejected one approves it swapped.
    """
    if choice in ("left", "right"):
        prefers_chosen = (choice == "left") == left_is_chosen
        return "approve", not prefers_chosen
    if choice == "approve":
        return "approve", False
    if choice == "swap":
        return "approve", True
    if choice in ("reject", "flag"):
        return choice, False
    raise ValueError(f"Unknown choice {choice!r}; use one of {', '.join(CHOICES)}")


def label_of(decision: str, swap: bool) -> str:
    """The verdict used for agreement: approve / swap / reject / flag (a swap only matters when approving)."""
    if decision == "approve":
        return "swap" if swap else "approve"
    if decision in ("reject", "flag"):
        return decision
    raise ValueError(f"Unknown decision {decision!r}")


def derive_state(*, labels: Sequence[str], overlap: int, source: str = "",
                 final_label: str = "") -> tuple[str, str, str]:
    """Return (state, final_label, source) of a row.

    A manual decision (admin or bulk) stands whatever the reviews say. Otherwise a row needs `overlap`
    reviews; unanimous reviews make a consensus, differing ones a conflict for an admin to resolve.
    """
    if source in MANUAL_SOURCES and final_label:
        return STATE_OF_LABEL[final_label], final_label, source
    if not labels or len(labels) < max(overlap, 1):
        return "unreviewed", "", ""
    if len(set(labels)) == 1:
        return STATE_OF_LABEL[labels[0]], labels[0], "consensus"
    return "conflict", "", ""


def votes_of(labels: Sequence[str]) -> tuple[int, int, int, int]:
    counts = Counter(labels)
    return tuple(counts[label] for label in LABELS)  # type: ignore[return-value]


@dataclass(frozen=True)
class RowSnapshot:
    state: str
    final_label: str = ""
    labels: Mapping[int, str] = field(default_factory=dict)  # reviewer id -> label


def contribution(row: RowSnapshot) -> Counter:
    """What one row adds to the version's counters."""
    out: Counter = Counter()
    out[("state", row.state)] += 1
    if row.labels:
        out[("profile", votes_of(list(row.labels.values())))] += 1
    reviewers = sorted(row.labels)
    for i, a in enumerate(reviewers):
        for b in reviewers[i + 1:]:
            out[("pair", a, b, row.labels[a], row.labels[b])] += 1
    if row.final_label:
        for reviewer, label in row.labels.items():
            out[("final_total", reviewer)] += 1
            out[("final_agree", reviewer)] += int(label == row.final_label)
    return out


def delta(old: RowSnapshot | None, new: RowSnapshot | None) -> dict[Hashable, int]:
    """contribution(new) - contribution(old), keeping only non-zero entries (negatives included)."""
    total: Counter = Counter()
    if new is not None:
        total.update(contribution(new))
    if old is not None:
        total.subtract(contribution(old))
    return {key: value for key, value in total.items() if value}


def merge(deltas: Sequence[Mapping[Hashable, int]]) -> dict[Hashable, int]:
    total: Counter = Counter()
    for d in deltas:
        total.update(d)
    return {key: value for key, value in total.items() if value}
