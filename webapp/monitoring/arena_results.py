"""Reading an arena: the next pair for a reviewer, and the results (wins, ties, losses kept apart, each with a
95 % Wilson interval; per-reviewer agreement). Reads only."""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from training.winrate import wilson_interval
from webapp.monitoring.models import Arena, ArenaJudgement, ArenaPair
from webapp.review.agreement import count_vectors, krippendorff_alpha_nominal, percent_agreement

CATEGORIES = ("a", "b", "tie", "both_bad")
WIDE = 0.3  # an interval wider than this is called out in words


def next_pair_for(arena: Arena, reviewer) -> ArenaPair | None:
    return arena.pairs.exclude(judgements__reviewer=reviewer).order_by("index").first()


@dataclass
class Share:
    count: int
    n: int

    @property
    def rate(self) -> float | None:
        return self.count / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.count, self.n) if self.n else None

    @property
    def lo(self) -> float | None:
        return self.interval[0] if self.n else None

    @property
    def hi(self) -> float | None:
        return self.interval[1] if self.n else None


@dataclass
class ArenaResults:
    pairs: int
    judged_pairs: int
    judgements: int
    outcome: dict[str, Share]  # per judged pair, the reviewers' majority: a / b / tie / both_bad
    decisive: Share  # B's share of the pairs that have a winner (ties and both-bad left out)
    reviewers: list[dict[str, Any]] = field(default_factory=list)
    alpha: float | None = None
    split_pairs: int = 0  # pairs whose reviewers split evenly between verdicts: counted as ties
    exportable: int = 0  # judgements with a winner (A or B): each can become a preference pair

    @property
    def too_few(self) -> bool:
        iv = self.decisive.interval
        return self.judged_pairs == 0 or iv is None or iv[1] - iv[0] > WIDE

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "judged_pairs": self.judged_pairs, "judgements": self.judgements,
                "split_pairs": self.split_pairs, "exportable_judgements": self.exportable,
                "outcome": {k: {"count": s.count, "n": s.n, "rate": s.rate, "lo": s.lo, "hi": s.hi}
                            for k, s in self.outcome.items()},
                "b_wins_of_decisive": {"count": self.decisive.count, "n": self.decisive.n, "rate": self.decisive.rate,
                                       "lo": self.decisive.lo, "hi": self.decisive.hi},
                "too_few": self.too_few, "alpha": self.alpha,
                "reviewers": [{k: v for k, v in r.items() if k != "user"} for r in self.reviewers]}


def majority(choices: list[str]) -> tuple[str, bool]:
    """(the pair's verdict, whether its reviewers split): the most common choice; an even split is a tie."""
    top = Counter(choices).most_common()
    if len(top) > 1 and top[0][1] == top[1][1]:
        return "tie", True
    return top[0][0], False


def arena_results(arena: Arena) -> ArenaResults:
    rows = list(ArenaJudgement.objects.filter(pair__arena=arena).select_related("reviewer")
                .values_list("pair_id", "reviewer_id", "reviewer__username", "choice"))
    by_pair: dict[int, dict[int, str]] = defaultdict(dict)
    names: dict[int, str] = {}
    for pair_id, rid, name, choice in rows:
        by_pair[pair_id][rid] = choice
        names[rid] = name
    verdicts, splits = [], 0
    for choices in by_pair.values():
        verdict, split = majority(list(choices.values()))
        verdicts.append(verdict)
        splits += split
    n = len(verdicts)
    tally = Counter(verdicts)
    outcome = {c: Share(tally[c], n) for c in CATEGORIES}
    decisive = Share(tally["b"], tally["a"] + tally["b"])
    results = ArenaResults(pairs=arena.pairs.count(), judged_pairs=n, judgements=len(rows), outcome=outcome,
                           decisive=decisive, split_pairs=splits, reviewers=_reviewers(by_pair, names),
                           alpha=_alpha(by_pair), exportable=sum(1 for *_, c in rows if c in ("a", "b")))
    return results


def _reviewers(by_pair: dict[int, dict[int, str]], names: dict[int, str]) -> list[dict[str, Any]]:
    """Each reviewer's counts and how often they agree with another reviewer on a pair both judged."""
    mine: dict[int, Counter] = defaultdict(Counter)
    together: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for choices in by_pair.values():
        for rid, c in choices.items():
            mine[rid][c] += 1
        for r1, r2 in combinations(sorted(choices), 2):
            together[r1].append((choices[r1], choices[r2]))
            together[r2].append((choices[r2], choices[r1]))
    out = []
    for rid in sorted(mine, key=lambda r: names[r]):
        agree = percent_agreement(together[rid]) if together[rid] else None
        out.append({"reviewer": names[rid], "judged": sum(mine[rid].values()),
                    **{c: mine[rid][c] for c in CATEGORIES}, "shared": len(together[rid]), "agreement": agree})
    return out


def _alpha(by_pair: dict[int, dict[int, str]]) -> float | None:
    """Krippendorff's alpha (nominal) over the pairs with two or more verdicts; None with fewer."""
    units = [list(c.values()) for c in by_pair.values() if len(c) >= 2]
    return krippendorff_alpha_nominal(count_vectors(units, CATEGORIES)) if units else None
