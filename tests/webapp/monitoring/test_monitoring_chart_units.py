"""Which charts draw their values as shares of a whole (a 0–100 % axis)."""
from __future__ import annotations

from webapp.monitoring import charts


def test_fractions_are_rates_and_other_metrics_are_not():
    for name in ("actor/pg_clipfrac", "rm/val_accuracy", "distill/top1_agreement", "val-core/math/win_rate"):
        assert charts.unit_for(name) == "rate", name
    for name in ("actor/lr", "actor/kl_loss", "response_length/mean", "val-core/math/win_rate_n"):
        assert charts.unit_for(name) == "", name


def test_default_charts_mark_fraction_charts():
    units = {c["id"]: c["unit"] for c in charts.default_charts(
        "distill", ["distill/loss", "distill/top1_agreement", "val/distill/top1_agreement"])}
    assert units["distill_top1_agreement"] == "rate" and units["distill_loss"] == ""
    assert units["val_distill"] == "rate" and units["lr"] == ""
    grpo = {c["id"]: c["unit"] for c in charts.default_charts("grpo", [])}
    assert grpo["clipfrac"] == "rate" and grpo["win_rate"] == "rate" and grpo["kl"] == ""
