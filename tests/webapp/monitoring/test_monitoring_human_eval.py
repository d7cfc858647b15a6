"""Human evaluation: blind sides recorded, verdicts -> human win rate with Wilson interval, disagreements."""
from __future__ import annotations

import pytest

from training.winrate import wilson_interval
from webapp.core.models import AuditLog
from webapp.core.services import ApplicationError
from webapp.monitoring import selectors
from webapp.monitoring.services import human_eval_create, human_eval_judge, human_eval_set_open

pytestmark = pytest.mark.django_db


def rows(n: int) -> list[dict]:
    # the reward says the policy wins the even items and loses the odd ones
    return [{"input": f"q{i}", "output": f"policy {i}", "reference": f"ref {i}", "score": 1.0 if i % 2 == 0 else 0.0,
             "reference_score": 0.5, "win": 1.0 if i % 2 == 0 else 0.0, "data_source": "d"} for i in range(n)]


@pytest.fixture
def task(make_job, checkpoint, samples, engineer):
    job = make_job()
    ckpt = checkpoint(job, 10)
    samples(job, 10, rows(8) + [{"input": "no ref", "output": "x", "reference": None}])
    return human_eval_create(checkpoint=ckpt, user=engineer, limit=50, seed=3)


def test_items_come_from_the_checkpoints_samples_with_random_recorded_sides(task):
    items = list(task.items.all())
    assert len(items) == 8  # the row without a reference is skipped
    assert items[0].prompt == "q0" and items[0].policy_response == "policy 0" and items[0].auto_outcome == 1.0
    sides = [i.policy_side for i in items]
    assert set(sides) == {"a", "b"}  # randomised
    for i in items:
        assert i.response(i.policy_side) == i.policy_response
        assert i.response("b" if i.policy_side == "a" else "a") == i.reference_response
    assert AuditLog.objects.filter(action="human_eval.create").exists()


def test_verdicts_give_a_human_win_rate_and_the_disagreements(task, reviewer, reviewer2):
    items = list(task.items.all())
    other = {"a": "b", "b": "a"}
    for it in items:
        # people prefer the reference everywhere except item 1 (where the reward said "loss")
        choice = it.policy_side if it.index == 1 else other[it.policy_side]
        human_eval_judge(item=it, reviewer=reviewer, choice=choice)
    human_eval_judge(item=items[2], reviewer=reviewer2, choice="tie")
    s = selectors.human_eval_summary(task)
    # per item: 7 items at 0 except item 1 at 1 and item 2 at (0 + 0.5) / 2
    assert s["judged"] == 8 and s["verdicts"] == 9 and s["reviewers"] == 2
    assert s["human"].rate == pytest.approx(1.25 / 8) and s["human"].n == 8
    assert (s["human"].lo, s["human"].hi) == pytest.approx(wilson_interval(1.25, 8))
    assert s["auto_same"].rate == pytest.approx(0.5)
    flagged = {d["item"].index: d for d in s["disagreements"]}
    # the reward liked items 0, 2, 4, 6 and people did not: reward-hacking suspects, biggest gap first
    assert set(flagged) == {0, 1, 2, 4, 6}
    assert flagged[0]["suspect"] and not flagged[1]["suspect"]
    assert s["disagreements"][0]["gap"] == 1.0 and s["disagreements"][-1]["item"].index == 1
    marks = selectors.win_rate_marks(task.checkpoint.job)
    assert marks["human"][0]["step"] == 10 and marks["human"][0]["n"] == 8
    # wins / ties / losses beside the rate: item 2's reviewers average ¼, on the losing side of ½
    assert (s["human"].wins, s["human"].ties, s["human"].losses) == (1, 0, 7)
    assert (marks["human"][0]["wins"], marks["human"][0]["losses"]) == (1, 7)
    assert (s["auto_same"].wins, s["auto_same"].ties, s["auto_same"].losses) == (4, 0, 4)


def test_the_pages_show_won_tied_lost_the_tie_rule_and_a_wide_interval_in_words(task, reviewer, viewer, as_user):
    for it in task.items.all():
        human_eval_judge(item=it, reviewer=reviewer, choice="tie" if it.index < 2 else it.policy_side)
    slug = task.project.slug
    detail = as_user(viewer).get(f"/p/{slug}/monitor/human-evals/{task.pk}/").content.decode()
    assert "6 won</span> · <span class=\"mon-t\">2 tied</span> · <span class=\"mon-l\">0 lost" in detail
    assert "Tie rule: a tie counts as half a win" in detail
    assert "Too few samples to trust this rate: only 8 judged pairs" in detail
    listing = as_user(viewer).get(f"/p/{slug}/monitor/human-evals/").content.decode()
    assert "6 won" in listing and "ties count ½" in listing


def test_a_reviewer_can_change_their_verdict_but_not_on_a_closed_task(task, reviewer, engineer):
    item = task.items.first()
    human_eval_judge(item=item, reviewer=reviewer, choice="a")
    v = human_eval_judge(item=item, reviewer=reviewer, choice="tie")
    assert v.outcome == 0.5 and item.verdicts.count() == 1
    with pytest.raises(ApplicationError, match="Choose one of"):
        human_eval_judge(item=item, reviewer=reviewer, choice="left")
    human_eval_set_open(task=task, user=engineer, is_open=False)
    with pytest.raises(ApplicationError, match="closed"):
        human_eval_judge(item=item, reviewer=reviewer, choice="a")


def test_no_samples_means_a_clear_message(make_job, checkpoint, engineer):
    ckpt = checkpoint(make_job(), 5)
    with pytest.raises(ApplicationError, match="Press Evaluate on this checkpoint first"):
        human_eval_create(checkpoint=ckpt, user=engineer)


def test_review_screen_is_blind_and_walks_through_the_items(task, reviewer, as_user, api_for, project):
    client = as_user(reviewer)
    page = f"/p/{project.slug}/monitor/human-evals/{task.pk}/review/"
    body = client.get(page).content.decode()
    first = task.items.get(index=0)
    card = body.split('id="he-item"')[1].split("</section>\n{% endif %}")[0]
    assert "q0" in card and "policy 0" in card and "ref 0" in card
    assert "Policy" not in card and "Reference" not in card and "score" not in card.lower()  # blind
    r = api_for(reviewer).post(f"/api/projects/{project.slug}/monitor/human-evals/{task.pk}/verdicts/",
                               {"item": first.pk, "choice": "tie"}, format="json")
    assert r.status_code == 201 and r.json()["next"] == task.items.get(index=1).pk
    assert "q1" in client.get(page).content.decode()
    bad = api_for(reviewer).post(f"/api/projects/{project.slug}/monitor/human-evals/{task.pk}/verdicts/",
                                 {"item": first.pk, "choice": "left"}, format="json")
    assert bad.status_code == 400


def test_create_from_the_checkpoint_table_and_see_the_summary(make_job, checkpoint, samples, engineer, as_user,
                                                               project):
    job = make_job()
    checkpoint(job, 10)
    samples(job, 10, rows(4))
    client = as_user(engineer)
    r = client.post(f"/p/{project.slug}/monitor/jobs/{job.pk}/checkpoints/10/human-eval/", {"limit": 3})
    assert r.status_code == 302
    detail = client.get(r["Location"]).content.decode()
    assert "Human evaluation #" in detail and "Nothing judged yet" in detail
    listing = client.get(f"/p/{project.slug}/monitor/human-evals/").content.decode()
    assert "0 / 3" in listing
