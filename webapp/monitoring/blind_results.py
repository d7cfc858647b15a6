"""Reading a blind task's verdicts (reads only): side B's wins, ties and losses against A with the win rate
(ties and "both bad" count ½) and its 95 % Wilson interval, the four outcomes kept apart, identical pairs
(ties without a verdict), per-reviewer agreement, and — where the run's reward judged the same pairs — where
people and the reward disagree. Pages show these only once the task is closed (services/blind.py).

Each pair counts once: its reviewers' majority verdict, an even split being a tie.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from training import winrate
from training.winrate import wilson_interval
from webapp.monitoring.models import BlindPair, BlindTask, BlindVerdict
from webapp.monitoring.winrates import from_summary
from webapp.review.agreement import count_vectors, krippendorff_alpha_nominal, percent_agreement

CATEGORIES = ("a", "b", "tie", "both_bad")
OUTCOME = {"b": winrate.WIN, "tie": winrate.TIE, "both_bad": winrate.TIE, "identical": winrate.TIE, "a": winrate.LOSS}
RULE = ("Each pair counts once, by its reviewers' majority verdict (an even split is a tie); a tie, “both bad” "
        "and a pair of identical responses each count as half a win.")


@dataclass
class Share:
    count: int
    n: int

    @property
    def rate(self) -> float | None:
        return self.count / self.n if self.n else None

    @property
    def lo(self) -> float | None:
        return wilson_interval(self.count, self.n)[0] if self.n else None

    @property
    def hi(self) -> float | None:
        return wilson_interval(self.count, self.n)[1] if self.n else None

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "n": self.n, "rate": self.rate, "lo": self.lo, "hi": self.hi}


@dataclass
class BlindResults:
    pairs: int
    identical: int  # pairs whose two responses are the same text: ties, never shown to reviewers
    judged_pairs: int  # other pairs with at least one verdict
    judgements: int
    outcome: dict[str, Share]  # over the counted pairs (judged + identical): a / b / tie / both_bad / identical
    b: winrate.WinRateSummary  # B's wins / ties / losses and win rate over the counted pairs
    decisive: Share  # B's share of the pairs that have a winner (no tie, no both-bad, not identical)
    reviewers: list[dict[str, Any]] = field(default_factory=list)
    alpha: float | None = None
    split_pairs: int = 0  # pairs whose reviewers split evenly: counted as ties
    exportable: int = 0  # verdicts with a winner on two different responses: each can become a preference pair
    reward: dict[str, Any] = field(default_factory=dict)  # the run's reward on the same pairs, and disagreements

    @property
    def counted(self) -> int:
        return self.judged_pairs + self.identical

    @property
    def too_few(self) -> bool:
        return self.b.wide

    @property
    def view(self) -> dict[str, Any]:
        return from_summary(self.b)

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "identical_pairs": self.identical, "judged_pairs": self.judged_pairs,
                "judgements": self.judgements, "split_pairs": self.split_pairs,
                "exportable_judgements": self.exportable, "rule": RULE,
                "outcome": {k: s.to_dict() for k, s in self.outcome.items()},
                "b": self.b.to_dict(), "b_wins_of_decisive": self.decisive.to_dict(),
                "too_few": self.too_few, "alpha": self.alpha,
                "reviewers": [{k: v for k, v in r.items() if k != "user"} for r in self.reviewers],
                "reward": {"same_pairs": self.reward["same"].to_dict(), "all_pairs": self.reward["all"].to_dict(),
                           "disagreements": len(self.reward["disagreements"])} if self.reward else None}


def majority(choices: list[str]) -> tuple[str, bool]:
    """(the pair's verdict, whether its reviewers split): the most common choice; an even split is a tie."""
    top = Counter(choices).most_common()
    if len(top) > 1 and top[0][1] == top[1][1]:
        return "tie", True
    return top[0][0], False


def blind_results(task: BlindTask) -> BlindResults:
    pairs = list(task.pairs.order_by("index"))
    rows = list(BlindVerdict.objects.filter(pair__task=task, pair__identical=False)
                .values_list("pair_id", "reviewer_id", "reviewer__username", "choice"))
    by_pair: dict[int, dict[int, str]] = defaultdict(dict)
    names: dict[int, str] = {}
    for pair_id, rid, name, choice in rows:
        by_pair[pair_id][rid] = choice
        names[rid] = name
    verdict_of: dict[int, str] = {p.pk: "identical" for p in pairs if p.identical}
    splits = 0
    for pair_id, choices in by_pair.items():
        verdict_of[pair_id], split = majority(list(choices.values()))
        splits += split
    n = len(verdict_of)
    tally = Counter(verdict_of.values())
    outcome = {c: Share(tally[c], n) for c in (*CATEGORIES, "identical")}
    summary = winrate.summarize(OUTCOME[v] for v in verdict_of.values())
    different = {p.pk for p in pairs if not p.identical and p.response_a.strip() and p.response_b.strip()}
    return BlindResults(
        pairs=len(pairs), identical=tally["identical"], judged_pairs=len(by_pair), judgements=len(rows),
        outcome=outcome, b=summary, decisive=Share(tally["b"], tally["a"] + tally["b"]), split_pairs=splits,
        reviewers=_reviewers(by_pair, names), alpha=_alpha(by_pair),
        exportable=sum(1 for pid, _r, _n, c in rows if c in ("a", "b") and pid in different),
        reward=_reward(pairs, verdict_of))


def _reward(pairs: list[BlindPair], verdict_of: dict[int, str]) -> dict[str, Any]:
    """The run's reward on the same pairs (when the samples carried its verdicts) and the pairs where it and
    people differ by at least a tie, reward-hacking suspects (the reward liked B, people did not) first."""
    if all(p.auto_outcome is None for p in pairs):
        return {}
    counted = [p for p in pairs if p.pk in verdict_of]
    disagreements = []
    for p in counted:
        human = OUTCOME[verdict_of[p.pk]]
        if p.auto_outcome is None or abs(p.auto_outcome - human) < 0.5:
            continue
        disagreements.append({"pair": p, "human": human, "auto": p.auto_outcome, "gap": p.auto_outcome - human,
                              "suspect": p.auto_outcome > human, "verdict": verdict_of[p.pk]})
    disagreements.sort(key=lambda d: (-d["gap"], d["pair"].index))
    same = winrate.summarize(p.auto_outcome for p in counted)
    every = winrate.summarize(p.auto_outcome for p in pairs)
    return {"same": same, "all": every, "same_view": from_summary(same), "all_view": from_summary(every),
            "disagreements": disagreements}


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


def pair_verdicts(task: BlindTask) -> dict[int, str]:
    """{pair id: its reviewers' majority verdict} of the judged pairs (an even split is a tie)."""
    by_pair: dict[int, list[str]] = defaultdict(list)
    for pair_id, choice in BlindVerdict.objects.filter(pair__task=task).values_list("pair_id", "choice"):
        by_pair[pair_id].append(choice)
    return {pk: majority(choices)[0] for pk, choices in by_pair.items()}
