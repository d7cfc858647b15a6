"""Win rates as the pages show them: wins, ties and losses beside the rate, the tie rule, and a sentence
when the interval is too wide (the maths is training/winrate.py's; this only gathers what a cell needs).

Every place a win rate appears (checkpoint table, evaluation, human evaluation, compare) renders one of
these dicts with `monitoring/_winrate.html`.
"""
from __future__ import annotations

from typing import Any

from training import winrate


def view(*, rate: float | None, lo: float | None, hi: float | None, n: int | None, wins: Any = None,
         ties: Any = None, losses: Any = None, accuracy: float | None = None) -> dict[str, Any]:
    """A win rate for a template; counts are None when the source did not record them (older runs)."""
    n = int(n or 0)
    counts = None if None in (wins, ties, losses) else (int(wins), int(ties), int(losses))
    decisive = counts[0] + counts[2] if counts else 0
    return {"rate": rate, "lo": lo, "hi": hi, "n": n, "counts": counts, "decisive": decisive,
            "decisive_share": counts[0] / decisive if decisive else None,
            "wins": counts[0] if counts else None, "ties": counts[1] if counts else None,
            "losses": counts[2] if counts else None, "accuracy": accuracy,
            "note": winrate.precision_note(n, lo, hi) if rate is not None else "", "tie_rule": winrate.TIE_RULE,
            "without_ties": winrate.decisive_text(*counts) if counts else ""}


def from_summary(summary: winrate.WinRateSummary, accuracy: float | None = None) -> dict[str, Any]:
    return view(rate=summary.rate, lo=summary.lo, hi=summary.hi, n=summary.n, wins=summary.wins, ties=summary.ties,
                losses=summary.losses, accuracy=accuracy)


def from_metrics(values: dict[str, float | None], source: str) -> dict[str, Any] | None:
    """One data source's win rate from the metrics logged at one step (None when it logged none)."""
    names = winrate.metric_names(source)
    if values.get(names["rate"]) is None:
        return None
    return view(rate=values.get(names["rate"]), lo=values.get(names["lo"]), hi=values.get(names["hi"]),
                n=values.get(names["n"]), wins=values.get(names["wins"]), ties=values.get(names["ties"]),
                losses=values.get(names["losses"]), accuracy=values.get(names["accuracy"]))


def metric_keys(source: str) -> list[str]:
    """Every series a win-rate cell of `source` reads."""
    return list(winrate.metric_names(source).values())


def from_evaluation(evaluation) -> dict[str, Any]:
    """An on-demand evaluation's result (older results have no counts: the cell then shows the rate only)."""
    result = evaluation.result or {}
    return view(rate=evaluation.win_rate, lo=evaluation.win_rate_lo, hi=evaluation.win_rate_hi, n=evaluation.n,
                wins=result.get("wins"), ties=result.get("ties"), losses=result.get("losses"),
                accuracy=result.get("accuracy"))


def text(v: dict[str, Any]) -> str:
    """One line for messages and events: "wins 1 · ties 3 · losses 0 of 4 (win rate 62.5%, ties count ½)"."""
    if v["rate"] is None:
        return "no comparable responses"
    rate = f"win rate {v['rate']:.1%} [{v['lo']:.1%}, {v['hi']:.1%}], ties count ½"
    head = (f"wins {v['wins']} · ties {v['ties']} · losses {v['losses']} of {v['n']}" if v["counts"]
            else f"{v['n']} prompts")
    acc = "" if v["accuracy"] is None else f" · accuracy {v['accuracy']:.1%}"
    return f"{head} ({rate}){acc}"
