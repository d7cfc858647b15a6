"""Human evaluation of a checkpoint against the references: a blind task (source "checkpoint") whose side B is the
policy; verdicts -> the human win rate with its Wilson interval, and the pairs where people and the reward differ,
all shown once the task is closed."""
from __future__ import annotations

import pytest

from training.winrate import wilson_interval
from webapp.core.models import AuditLog
from webapp.core.services import ApplicationError
from webapp.monitoring import selectors
from webapp.monitoring.blind_results import blind_results
from webapp.monitoring.services import human_eval_create, task_set_open, verdict_record
from webapp.monitoring.services.blind import left_side

pytestmark = pytest.mark.django_db


def rows(n: int) -> list[dict]:
    # the reward says the policy wins the even items and loses the odd ones
    return [{"input": f"q{i}", "output": f"policy {i}", "reference": f"ref {i}", "score": 1.0 if i % 2 == 0 else 0.0,
             "reference_score": 0.5, "win": 1.0 if i % 2 == 0 else 0.0, "data_source": "d", "gts": f"{i}"}
            for i in range(n)]


@pytest.fixture
def task(make_job, checkpoint, samples, engineer):
    job = make_job()
    ckpt = checkpoint(job, 10)
    samples(job, 10, rows(8) + [{"input": "no ref", "output": "x", "reference": None}])
    return human_eval_create(checkpoint=ckpt, user=engineer, limit=50)


def pick(pair, user, side: str) -> str:
    return "left" if left_side(pair, user) == side else "right"


def test_pairs_come_from_the_checkpoints_samples_with_the_policy_as_side_b(task):
    pairs = list(task.pairs.all())
    assert len(pairs) == 8  # the row without a reference is skipped
    p0 = pairs[0]
    assert (p0.prompt_text, p0.response_b, p0.response_a, p0.auto_outcome) == ("q0", "policy 0", "ref 0", 1.0)
    assert (p0.score_b, p0.score_a, p0.ground_truth, p0.data_source) == (1.0, 0.5, "0", "d")
    assert task.source == "checkpoint" and task.anyone_may_judge and task.sides["b"]["step"] == 10
    assert AuditLog.objects.filter(action="human_eval.create").exists()


def test_verdicts_give_a_human_win_rate_and_the_disagreements(task, reviewer, reviewer2, engineer):
    pairs = list(task.pairs.all())
    for p in pairs:
        # people prefer the reference everywhere except item 1 (where the reward said "loss")
        verdict_record(pair=p, reviewer=reviewer, choice=pick(p, reviewer, "b" if p.index == 1 else "a"))
    verdict_record(pair=pairs[2], reviewer=reviewer2, choice="tie")
    assert selectors.win_rate_marks(task.b_checkpoint.job)["human"] == []  # open: nothing on the run's chart
    task_set_open(task=task, user=engineer, is_open=False)
    res = blind_results(task)
    # per pair, the majority: item 1 won, item 2 split (a tie), six lost
    assert res.judged_pairs == 8 and res.judgements == 9 and res.split_pairs == 1
    assert (res.b.wins, res.b.ties, res.b.losses) == (1, 1, 6)
    assert res.b.rate == pytest.approx(1.5 / 8) and (res.b.lo, res.b.hi) == pytest.approx(wilson_interval(1.5, 8))
    assert res.reward["same"].rate == pytest.approx(0.5)
    flagged = {d["pair"].index: d for d in res.reward["disagreements"]}
    # the reward liked items 0, 4, 6 and people did not; item 2 a tie by people: half a gap
    assert set(flagged) == {0, 1, 2, 4, 6}
    assert flagged[0]["suspect"] and not flagged[1]["suspect"]
    assert res.reward["disagreements"][0]["gap"] == 1.0 and res.reward["disagreements"][-1]["pair"].index == 1
    marks = selectors.win_rate_marks(task.b_checkpoint.job)
    assert marks["human"][0]["step"] == 10 and marks["human"][0]["n"] == 8
    assert (marks["human"][0]["wins"], marks["human"][0]["losses"]) == (1, 6)
    assert (res.reward["same"].wins, res.reward["same"].ties, res.reward["same"].losses) == (4, 0, 4)


def test_the_pages_show_won_tied_lost_the_tie_rule_and_a_wide_interval_in_words(task, reviewer, engineer, viewer,
                                                                                 as_user):
    for p in task.pairs.all():
        verdict_record(pair=p, reviewer=reviewer, choice="tie" if p.index < 2 else pick(p, reviewer, "b"))
    task_set_open(task=task, user=engineer, is_open=False)
    slug = task.project.slug
    detail = as_user(viewer).get(f"/p/{slug}/monitor/blind/{task.pk}/").content.decode()
    assert "6 won</span> · <span class=\"mon-t\">2 tied</span> · <span class=\"mon-l\">0 lost" in detail
    assert "win rate (ties count ½)" in detail and "Too few samples to trust this rate: only 8 judged pairs" in detail
    assert "Setting the 2 ties aside: won 6 of the 6 pairs that had a winner (100%)." in detail
    listing = as_user(viewer).get(f"/p/{slug}/monitor/human-evals/").content.decode()
    assert "6 won" in listing and "ties count ½" in listing


def test_a_reviewer_can_change_their_verdict_but_not_on_a_closed_task(task, reviewer, engineer):
    pair = task.pairs.first()
    verdict_record(pair=pair, reviewer=reviewer, choice="left")
    v = verdict_record(pair=pair, reviewer=reviewer, choice="tie")
    assert v.choice == "tie" and pair.verdicts.count() == 1
    with pytest.raises(ApplicationError, match="Choose one of"):
        verdict_record(pair=pair, reviewer=reviewer, choice="a")
    task_set_open(task=task, user=engineer, is_open=False)
    with pytest.raises(ApplicationError, match="closed"):
        verdict_record(pair=pair, reviewer=reviewer, choice="left")


def test_no_samples_means_a_clear_message(make_job, checkpoint, engineer):
    ckpt = checkpoint(make_job(), 5)
    with pytest.raises(ApplicationError, match="Press Evaluate on this checkpoint first"):
        human_eval_create(checkpoint=ckpt, user=engineer)


def test_the_judging_screen_is_blind_and_walks_through_the_pairs(task, reviewer, as_user, api_for, project):
    client = as_user(reviewer)
    page = f"/p/{project.slug}/monitor/blind/{task.pk}/judge/"
    body = client.get(page).content.decode()
    first = task.pairs.get(index=0)
    card = body.split('id="he-item"')[1].split("</section>\n{% endif %}")[0]
    assert "q0" in card and "policy 0" in card and "ref 0" in card
    assert "Policy" not in card and "Reference" not in card and "score" not in card.lower()  # blind
    r = api_for(reviewer).post(f"/api/projects/{project.slug}/monitor/blind/{task.pk}/verdicts/",
                               {"pair": first.pk, "choice": "tie"}, format="json")
    assert r.status_code == 201 and r.json()["next"] == task.pairs.get(index=1).pk
    assert "q1" in client.get(page).content.decode()
    # an old link to the review screen (as in a sent notification) lands on the judging screen
    assert client.get(f"/p/{project.slug}/monitor/human-evals/{task.pk}/review/").url.endswith(
        f"/monitor/blind/{task.pk}/judge/")


def test_create_from_the_checkpoint_table_and_see_the_task(make_job, checkpoint, samples, engineer, as_user,
                                                            project):
    job = make_job()
    checkpoint(job, 10)
    samples(job, 10, rows(4))
    client = as_user(engineer)
    r = client.post(f"/p/{project.slug}/monitor/jobs/{job.pk}/checkpoints/10/human-eval/", {"limit": 3})
    assert r.status_code == 302
    detail = client.get(r["Location"]).content.decode()
    assert "Human evaluation against the references #" in detail and "data-results-hidden" in detail
    assert "Anyone in the project who may review can judge it." in detail
    listing = client.get(f"/p/{project.slug}/monitor/human-evals/").content.decode()
    assert "0 of 3 judged" in listing
