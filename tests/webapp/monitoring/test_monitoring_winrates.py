"""Honest win rates on the pages: wins, ties and losses beside every rate, the tie rule, a wide interval
said in words, and validation accuracy where a ground truth exists."""
from __future__ import annotations

import pytest

from training import winrate
from webapp.monitoring import winrates
from webapp.monitoring.models import CheckpointEvaluation, EvaluationStatus

pytestmark = pytest.mark.django_db


def panel(client, job) -> str:
    r = client.get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/checkpoints/")
    assert r.status_code == 200
    return r.content.decode()


def test_view_gathers_counts_rule_and_precision():
    demo = winrates.from_summary(winrate.summarize([1.0, 0.5, 0.5, 0.5]), accuracy=0.25)
    assert demo["counts"] == (1, 3, 0) and demo["accuracy"] == 0.25 and "only 4" in demo["note"]
    assert demo["decisive"] == 1 and demo["decisive_share"] == 1.0
    assert winrates.text(demo).startswith("wins 1 · ties 3 · losses 0 of 4 (win rate 62.5%")
    assert winrates.text(demo).endswith("accuracy 25.0%")
    old = winrates.view(rate=0.5, lo=0.4, hi=0.6, n=100)  # a result from before the counts were recorded
    assert old["counts"] is None and old["note"] == "" and winrates.text(old).startswith("100 prompts")
    assert winrates.from_metrics({}, "arith") is None


def test_checkpoint_table_shows_the_validation_and_evaluation_win_rates_with_their_parts(
        make_job, checkpoint, points, viewer, as_user):
    job = make_job()
    names = winrate.metric_names("arith")
    for key, value in [("rate", 0.625), ("lo", 0.3), ("hi", 0.9), ("n", 4), ("wins", 1), ("ties", 3), ("losses", 0),
                       ("accuracy", 0.25)]:
        points(job, names[key], [value], start_step=5)
    ckpt = checkpoint(job, 5)
    CheckpointEvaluation.objects.create(
        checkpoint=ckpt, status=EvaluationStatus.SUCCEEDED, win_rate=0.55, win_rate_lo=0.45, win_rate_hi=0.65, n=200,
        result={"wins": 90, "ties": 40, "losses": 70, "accuracy": 0.6})
    body = panel(as_user(viewer), job)
    assert "Validation win rate arith" in body
    assert '1 won</span> · <span class="mon-t">3 tied</span> · <span class="mon-l">0 lost</span></span> of 4' in body
    assert "62.5%" in body and "accuracy 25.0%" in body and "win rate (ties count ½)" in body
    assert "Too few samples to trust this rate: only 4 judged pairs" in body
    # the evaluation: 200 pairs, ±10 points: no warning for it
    assert "90 won" in body and "40 tied" in body and "70 lost" in body and "accuracy 60.0%" in body
    assert body.count("Too few samples") == 1
    # what the rate is without the ties, said in words (it read "ties left out: 100.0 % of 1 decisive pair")
    assert "Setting the 3 ties aside: won 1 of the 1 pair that had a winner (100%).<" in body
    assert "Setting the 40 ties aside: won 90 of the 160 pairs that had a winner (56%).<" in body
    assert "decisive pair" not in body


def test_the_checkpoints_api_reports_wins_ties_losses_and_too_few_like_every_win_rate(make_job, checkpoint, viewer,
                                                                                        api_for):
    job = make_job()
    small, large, old = checkpoint(job, 5), checkpoint(job, 10), checkpoint(job, 15)
    CheckpointEvaluation.objects.create(checkpoint=small, status=EvaluationStatus.SUCCEEDED, win_rate=0.625,
                                        win_rate_lo=0.3, win_rate_hi=0.9, n=4,
                                        result={"wins": 1, "ties": 3, "losses": 0})
    CheckpointEvaluation.objects.create(checkpoint=large, status=EvaluationStatus.SUCCEEDED, win_rate=0.55,
                                        win_rate_lo=0.48, win_rate_hi=0.62, n=200,
                                        result={"wins": 90, "ties": 40, "losses": 70})
    CheckpointEvaluation.objects.create(checkpoint=old, status=EvaluationStatus.SUCCEEDED, win_rate=0.5,
                                        win_rate_lo=0.4, win_rate_hi=0.6, n=100, result={})  # counts not kept then
    body = api_for(viewer).get(f"/api/projects/{job.project.slug}/monitor/jobs/{job.pk}/checkpoints/").json()
    ev = {c["step"]: c["evaluation"] for c in body["checkpoints"]}
    assert {k: ev[5][k] for k in ("wins", "ties", "losses", "n", "win_rate", "too_few")} == {
        "wins": 1, "ties": 3, "losses": 0, "n": 4, "win_rate": 0.625, "too_few": True}
    assert "only 4 judged pairs" in ev[5]["note"] and "won 1 of the 1 pair" in ev[5]["without_ties"]
    assert (ev[10]["wins"], ev[10]["ties"], ev[10]["losses"], ev[10]["too_few"], ev[10]["note"]) == (90, 40, 70, False,
                                                                                                     "")
    assert (ev[15]["wins"], ev[15]["win_rate"], ev[15]["n"]) == (None, 0.5, 100)


def test_win_rate_chart_states_the_tie_rule_and_draws_the_parts(make_job, points, viewer, as_user):
    import json

    job = make_job()
    points(job, "val-core/arith/win_rate", [0.5])
    points(job, "val-core/arith/accuracy", [0.5])
    body = as_user(viewer).get(f"/p/{job.project.slug}/jobs/{job.pk}/").content.decode()
    config = json.loads(body.split('id="monitor-config" type="application/json">')[1].split("</script>")[0])
    chart = next(c for c in config["charts"] if c["id"] == "win_rate")
    assert "a tie counts as half a win" in chart["note"] and chart["wide"] == {"n": 30, "half_width": 0.15}
    assert chart["series"][0]["parts"] == {"wins": "val-core/arith/win_rate_wins",
                                           "ties": "val-core/arith/win_rate_ties",
                                           "losses": "val-core/arith/win_rate_losses"}
    assert chart["series"][1]["name"] == "val-core/arith/accuracy"
