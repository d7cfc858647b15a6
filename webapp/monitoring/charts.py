"""The default charts of a job: pure data (no ORM), turned into Plotly figures by monitor.js.

A chart is `{"id", "title", "series": [{"name", "label", "band": [lo, hi] | None, "count": name | None}],
"threshold": {"value", "label"} | None, "unit": "" | "rate"}`. `band` names two series drawn as a
shaded range under the main line (reward min/max, the win rate's 95% interval); `count` names a
series shown in the hover (how many prompts a win rate was measured on); `parts` ({"wins", "ties",
"losses"}) names the count series of a win rate, shown in its hover and drawn as shares. A chart may
carry a `note` (shown under it) and `wide` (when its latest interval is too wide to read).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from training import garbled, winrate
from training.guard_rules import KL_RULE, kl_rule
from training.rollouts import TOTAL_METRIC

KL_METRIC = "actor/kl_loss"
DEFAULT_KL_THRESHOLD = 0.1
WIN_RATE = re.compile(r"^val-core/(?P<source>.+)/win_rate$")
# training.rollouts.component_metrics: reward/<component>/mean, /error_share and /<key>/mean (dict rewards)
COMPONENT = re.compile(r"^reward/(?P<component>[^/]+)/mean$")
COMPONENT_EXTRA = re.compile(r"^reward/(?P<component>[^/]+)/(?P<key>.+)/mean$")


def series(name: str, label: str = "", band: tuple[str, str] | None = None, count: str | None = None) -> dict:
    return {"name": name, "label": label or name, "band": list(band) if band else None, "count": count}


# Metrics that are shares of a whole (drawn on a 0–100 % axis): clip fractions, accuracies, agreement, win rates.
FRACTION = re.compile(r"(frac|fraction|accuracy|agreement|win_rate)$")


def unit_for(name: str) -> str:
    return "rate" if FRACTION.search(name) else ""


def chart(chart_id: str, title: str, items: list[dict], threshold: dict | None = None, unit: str = "",
          smooth: bool = True) -> dict:
    return {"id": chart_id, "title": title, "series": items, "threshold": threshold, "unit": unit, "smooth": smooth}


def kl_line(config: dict[str, Any] | None) -> tuple[float, str]:
    """The KL chart's threshold line: the KL guard's (the "kl" health rule), on or off; 0.1 when there is none."""
    rule = kl_rule((config or {}).get("guard_rules"))
    if rule is None:
        return DEFAULT_KL_THRESHOLD, f"KL threshold {DEFAULT_KL_THRESHOLD:g} (guard off)"
    if not rule.enabled:
        return rule.threshold, f"KL threshold {rule.threshold:g} (guard off)"
    name = "KL guard" if rule.name == KL_RULE else f"rule {rule.name}:"
    return rule.threshold, f"{name} {rule.threshold:g}"


def win_rate_sources(names: Iterable[str]) -> list[str]:
    """Data sources that have a validation win-rate series, sorted."""
    return sorted({m.group("source") for n in names if (m := WIN_RATE.match(n))})


def win_rate_chart(names: Iterable[str]) -> dict:
    """Per data source: the win rate (ties ½) with its 95% band, wins / ties / losses in the hover and as
    shares, and the accuracy against the ground truth where the source has one. The chart states the tie
    rule, and monitor.js adds "too few samples" in words when the latest interval is wide."""
    names = set(names)
    sources = win_rate_sources(names) or ["default"]
    items = []
    for s in sources:
        n = winrate.metric_names(s)
        item = series(n["rate"], f"win rate {s}" if len(sources) > 1 else "win rate", band=(n["lo"], n["hi"]),
                      count=n["n"])
        item["parts"] = {"wins": n["wins"], "ties": n["ties"], "losses": n["losses"]}
        items.append(item)
    for s in sources:
        n = winrate.metric_names(s)
        if n["accuracy"] in names:
            label = f"accuracy {s}" if len(sources) > 1 else "accuracy"
            items.append(series(n["accuracy"], label, count=n["accuracy_n"]))
    out = chart("win_rate", "Validation win rate vs reference (95% interval)", items, unit="rate")
    out["note"] = (f"Tie rule: {winrate.TIE_RULE}. Wins, ties and losses are drawn separately (dotted: their "
                   "shares); accuracy = share of answers scoring correct against the ground truth.")
    out["wide"] = {"n": winrate.WIDE_N, "half_width": winrate.WIDE_HALF_WIDTH}
    return out


def reward_component_charts(names: Iterable[str]) -> list[dict]:
    """One line per reward component next to the optimised total, each component's share of errors, and
    the other numbers of rewards that return a dict; nothing for a run that logged no component."""
    names = set(names)
    components = sorted({m.group("component") for n in names if (m := COMPONENT.match(n))})
    if not components:
        return []
    charts = [
        chart("reward_components", "Reward components (mean) and the optimised total",
              [series(TOTAL_METRIC, "total (optimised)")] + [series(f"reward/{c}/mean", c) for c in components]),
        chart("reward_errors", "Reward errors (share of samples where a component failed)",
              [series(f"reward/{c}/error_share", c) for c in components], unit="rate"),
    ]
    extras = sorted(n for n in names if COMPONENT_EXTRA.match(n) and not COMPONENT.match(n))
    if extras:
        charts.append(chart("reward_extras", "Reward details (the other numbers a reward returned)",
                            [series(n, n[len("reward/"):-len("/mean")]) for n in extras]))
    return charts


def _grpo(names: set[str], config: dict) -> list[dict]:
    threshold, label = kl_line(config)
    return [
        chart("reward", "Reward (mean, min–max band)",
              [series("critic/score/mean", "mean", band=("critic/score/min", "critic/score/max"))]),
        *reward_component_charts(names),
        chart("kl", "KL to the reference policy",
              [series(KL_METRIC, "KL loss")], threshold={"value": threshold, "label": label}),
        win_rate_chart(names),
        chart("entropy", "Entropy", [series("actor/entropy", "entropy")]),
        chart("response_length", "Response length (tokens)",
              [series("response_length/mean", "mean", band=("response_length/min", "response_length/max"))]),
        chart("pg_loss", "Policy loss", [series("actor/pg_loss", "policy loss")]),
        chart("clipfrac", "Clip fraction", [series("actor/pg_clipfrac", "clip fraction")], unit="rate"),
        garbled_chart(),
    ]


def garbled_chart() -> dict:
    """Shares of the step's responses that loop, carry broken encoding or switch script (training.garbled)."""
    return chart("garbled", "Garbled output (share of responses)",
                 [series(garbled.GARBLED_SHARE, "any"), series(garbled.REPETITION_SHARE, "repetition"),
                  series(garbled.ENCODING_SHARE, "broken encoding"),
                  series(garbled.SCRIPT_SWITCH_SHARE, "script switch")], unit="rate")


def _prefixed(prefix: str, names: set[str], preferred: list[str]) -> list[dict]:
    """One chart per metric under `prefix`, the preferred ones first (they exist before data arrives)."""
    found = sorted(n for n in names if n.startswith(prefix))
    ordered = preferred + [n for n in found if n not in preferred]
    return [chart(n.replace("/", "_"), n[len(prefix):].replace("_", " ").capitalize(), [series(n)], unit=unit_for(n))
            for n in ordered]


def _distill(names: set[str]) -> list[dict]:
    charts = _prefixed("distill/", names, ["distill/loss", "distill/kd_loss", "distill/top1_agreement"])
    charts += reward_component_charts(names)  # on-policy distillation with a task reward
    val = sorted(n for n in names if n.startswith("val/distill/"))
    if val:
        charts.append(chart("val_distill", "Validation (teacher agreement)", [series(n, n[4:]) for n in val],
                            unit="rate" if all(unit_for(n) for n in val) else ""))
    if win_rate_sources(names):
        charts.append(win_rate_chart(names))
    charts.append(chart("response_length", "Response length (tokens)", [series("response_length/mean", "mean")]))
    return charts


def _reward_model(names: set[str]) -> list[dict]:
    return [
        chart("rm_loss", "Loss (train / validation)", [series("rm/loss", "train"), series("rm/val_loss", "val")]),
        chart("rm_accuracy", "Pairwise accuracy (train / validation)",
              [series("rm/accuracy", "train"), series("rm/val_accuracy", "val")], unit="rate"),
        chart("rm_margin", "Reward margin (chosen − rejected)", [series("rm/margin", "margin")]),
        chart("rm_rewards", "Chosen vs rejected reward",
              [series("rm/chosen_reward/mean", "chosen"), series("rm/rejected_reward/mean", "rejected")]),
    ] + [c for c in _prefixed("rm/", names, []) if c["series"][0]["name"] not in _RM_SHOWN]


_RM_SHOWN = {"rm/loss", "rm/val_loss", "rm/accuracy", "rm/val_accuracy", "rm/margin", "rm/chosen_reward/mean",
             "rm/rejected_reward/mean"}

_COMMON = [
    chart("lr", "Learning rate", [series("actor/lr", "lr")], smooth=False),  # a schedule, not a noisy signal
    chart("throughput", "Throughput (tokens/s)", [series("perf/throughput", "tokens/s")]),
]


def default_charts(kind: str, names: Iterable[str], config: dict[str, Any] | None = None) -> list[dict]:
    """The charts a job of `kind` shows by default, given the metric names it has logged so far."""
    names = set(names)
    if kind == "distill":
        charts = _distill(names)
    elif kind == "reward_model":
        charts = _reward_model(names)
    else:
        charts = _grpo(names, config or {})
    return charts + [dict(c) for c in _COMMON]
