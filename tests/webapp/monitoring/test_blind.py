"""Blind pairwise judging, for every source: sides drawn from a secret (a reviewer predicts them no better than
chance), results hidden until a task closes, assignment enforced, identical responses recorded as ties, and one
API ("judge, then the next pair") for arenas and human evaluations alike."""
from __future__ import annotations

import random

import pytest

from webapp.core.services import ApplicationError
from webapp.monitoring.blind_results import blind_results
from webapp.monitoring.models import BlindPair, BlindSource, BlindTask, BlindVerdict, EvaluationStatus
from webapp.monitoring.services import blind

pytestmark = pytest.mark.django_db


def make_task(project, source=BlindSource.ARENA, responses=None, **fields) -> BlindTask:
    """A generated task whose pairs are (A's response, B's response)."""
    responses = responses if responses is not None else [(f"{i + 5}", f"{i + 1}") for i in range(4)]
    defaults = {"title": "step 10 vs step 20", "status": EvaluationStatus.SUCCEEDED, "progress": 1.0, "seed": 7,
                "sides": {"a": {"label": "step 10", "step": 10}, "b": {"label": "step 20", "step": 20}},
                "anyone_may_judge": True}
    task = BlindTask.objects.create(project=project, source=source, **{**defaults, **fields})
    BlindPair.objects.bulk_create([
        blind.new_pair(task, i, response_a=a, response_b=b, prompt=f"{i}+1=", prompt_text=f"{i}+1=", seed=7 + i)
        for i, (a, b) in enumerate(responses)])
    return task


def press(pair, user, side: str) -> str:
    """The key a reviewer presses to pick `side` wherever it is shown to them."""
    return "left" if blind.left_side(pair, user) == side else "right"


def test_a_reviewer_predicts_the_sides_no_better_than_chance(project, reviewer, reviewer2, as_user, api_for):
    """The audit's predictors (arena: random.Random seeded by arena id, index, seed and user id; periodic: the
    task and checkpoint ids) predicted every side; against the secret they are a coin toss."""
    n = 400
    task = make_task(project, responses=[(f"a{i}", f"b{i}") for i in range(n)])
    pairs = list(task.pairs.order_by("index"))
    arena_guess = [random.Random(f"{task.pk}:{p.index}:{p.seed}:{reviewer.pk}").choice(["a", "b"]) for p in pairs]
    rng = random.Random(task.pk * 7919 + 1)
    periodic_guess = [rng.choice(["a", "b"]) for _ in pairs]
    actual = [blind.left_side(p, reviewer) for p in pairs]
    for guess in (arena_guess, periodic_guess):
        hits = sum(g == s for g, s in zip(guess, actual, strict=True))
        assert 0.4 * n < hits < 0.6 * n  # chance: 200 ± 10 (4 standard deviations either side)
    assert 0.4 * n < sum(a == "a" for a in actual) < 0.6 * n
    other = [blind.left_side(p, reviewer2) for p in pairs]  # each reviewer has an order of their own
    assert 0.4 * n < sum(x == y for x, y in zip(actual, other, strict=True)) < 0.6 * n
    # what the screen shows follows the secret, the same on every visit, and the secret is never shown
    first = pairs[0]
    page = as_user(reviewer).get(f"/p/{project.slug}/monitor/blind/{task.pk}/judge/").content.decode()
    left_text = page.split('aria-labelledby="ar-left"')[1].split("<pre>")[1].split("</pre>")[0]
    assert left_text == first.response(actual[0])
    again = as_user(reviewer).get(f"/p/{project.slug}/monitor/blind/{task.pk}/judge/").content.decode()
    assert again.split('aria-labelledby="ar-left"')[1].split("</pre>")[0] == \
        page.split('aria-labelledby="ar-left"')[1].split("</pre>")[0]
    nxt = api_for(reviewer).get(f"/api/projects/{project.slug}/monitor/blind/{task.pk}/next/").json()
    assert nxt["left"] == first.response(actual[0]) and "order_key" not in str(nxt) and first.order_key not in page
    detail = api_for(reviewer).get(f"/api/projects/{project.slug}/monitor/blind/{task.pk}/").json()
    assert first.order_key not in str(detail) and "shown_left" not in str(detail)


def test_results_stay_hidden_until_the_task_closes(project, reviewer, engineer, viewer, as_user, api_for):
    task = make_task(project)
    api = api_for(reviewer)
    url = f"/api/projects/{project.slug}/monitor/blind/{task.pk}/"
    for p in task.pairs.order_by("index")[:3]:  # B (the right sums) wherever it is shown
        r = api.post(url + "verdicts/", {"pair": p.pk, "choice": press(p, reviewer, "b")}, format="json")
        assert r.status_code == 201
    for who in (reviewer, viewer, engineer):
        page = as_user(who).get(f"/p/{project.slug}/monitor/blind/{task.pk}/").content.decode()
        assert "data-results-hidden" in page and 'id="blind-results"' not in page
        assert "won</span>" not in page and "B wins" not in page and 'id="arena-pairs"' not in page
        listing = as_user(who).get(f"/p/{project.slug}/monitor/arenas/").content.decode()
        assert "shown once closed" in listing and "won</span>" not in listing
        body = api_for(who).get(url).json()
        assert "results" not in body and "gap" not in body
    # the audit log (engineers read it) names the keys pressed, not the sides
    from webapp.core.models import AuditLog

    entries = list(AuditLog.objects.filter(action="blind.judge"))
    assert len(entries) == 3 and all("better" not in e.summary and "choice" not in e.after for e in entries)
    # engineers (who close it) see how far judging has come, and nothing of who is ahead
    counts = api_for(engineer).get(url).json()["progress_counts"]
    assert counts == {"pairs": 4, "judged_pairs": 3, "identical": 0, "reviewers": [{"reviewer": "rita", "judged": 3}]}
    assert "progress_counts" not in api_for(reviewer).get(url).json()
    assert "rita" in as_user(engineer).get(f"/p/{project.slug}/monitor/blind/{task.pk}/").content.decode()
    as_user(engineer).post(f"/p/{project.slug}/monitor/blind/{task.pk}/toggle/")
    closed = api_for(reviewer).get(url).json()
    assert closed["results"]["b"]["wins"] == 3 and closed["results"]["outcome"]["b"]["count"] == 3
    page = as_user(reviewer).get(f"/p/{project.slug}/monitor/blind/{task.pk}/").content.decode()
    assert 'id="blind-results"' in page and "3 won</span>" in page and 'id="arena-pairs"' in page
    assert "rita: b is better" in page


def test_an_unassigned_admin_cannot_judge_an_assigned_task(project, reviewer, admin_user, engineer, as_user, api_for):
    task = make_task(project, source=BlindSource.PERIODIC, anyone_may_judge=False)
    task.assignees.set([reviewer])
    pair = task.pairs.first()
    url = f"/api/projects/{project.slug}/monitor/blind/{task.pk}/verdicts/"
    r = api_for(admin_user).post(url, {"pair": pair.pk, "choice": "left"}, format="json")
    assert r.status_code == 403 and "assigned to other reviewers" in r.json()["detail"]
    assert not BlindVerdict.objects.exists()
    with pytest.raises(ApplicationError, match="assigned to other reviewers"):
        blind.verdict_record(pair=pair, reviewer=admin_user, choice="tie")
    assert api_for(admin_user).get(url.replace("verdicts/", "next/")).status_code == 403
    page = as_user(admin_user).get(f"/p/{project.slug}/monitor/blind/{task.pk}/").content.decode()
    assert "Assigned to rita." in page and "assigned to other reviewers" in page and "Judge (" not in page
    assert "assigned to other reviewers" in as_user(admin_user).get(
        f"/p/{project.slug}/monitor/blind/{task.pk}/judge/").content.decode()
    assert api_for(reviewer).post(url, {"pair": pair.pk, "choice": "left"}, format="json").status_code == 201
    # "anyone may judge" is an explicit option of the task, shown on it
    r = as_user(engineer).post(f"/p/{project.slug}/monitor/blind/{task.pk}/assign/", {"anyone": "on"}, follow=True)
    assert "Anyone in the project who may review can judge it." in r.content.decode()
    assert api_for(admin_user).post(url, {"pair": pair.pk, "choice": "tie"}, format="json").status_code == 201
    r = api_for(engineer).post(url.replace("verdicts/", "assign/"), {"anyone": False, "assignees": ["nobody"]},
                               format="json")
    assert r.status_code == 400


def test_identical_responses_are_ties_never_shown_and_not_counted_as_winners(project, reviewer, engineer, as_user,
                                                                              api_for):
    task = make_task(project, responses=[("3", "3"), ("3", " 3\n"), ("4", "3")])
    same = list(task.pairs.filter(identical=True).order_by("index"))
    assert [p.index for p in same] == [0, 1]
    assert blind.next_pair_for(task, reviewer).index == 2
    with pytest.raises(ApplicationError, match="recorded as a tie"):
        blind.verdict_record(pair=same[0], reviewer=reviewer, choice="left")
    page = as_user(reviewer).get(f"/p/{project.slug}/monitor/blind/{task.pk}/judge/").content.decode()
    assert "2 pairs of this task had the same response on both sides" in page and "2+1=" in page
    assert f"?pair={same[0].pk}" not in page
    p = task.pairs.get(index=2)
    blind.verdict_record(pair=p, reviewer=reviewer, choice=press(p, reviewer, "b"))
    assert blind.next_pair_for(task, reviewer) is None
    blind.task_set_open(task=task, user=engineer, is_open=False)
    res = blind_results(task)
    assert (res.b.wins, res.b.ties, res.b.losses, res.identical, res.decisive.n) == (1, 2, 0, 2, 1)
    page = as_user(engineer).get(f"/p/{project.slug}/monitor/blind/{task.pk}/").content.decode()
    sentence = page.split("data-decisive-sentence>")[1].split("</p>")[0]
    assert "B wins 1 of the 1 pair that has a winner" in sentence
    assert "2 pairs had identical responses and count as ties" in sentence
    assert "of the 3 pairs that have a winner" not in page


def test_an_assigned_task_closes_itself_once_every_assignee_has_judged(project, reviewer, reviewer2):
    task = make_task(project, source=BlindSource.PERIODIC, anyone_may_judge=False, responses=[("x", "y"), ("u", "v")])
    task.assignees.set([reviewer, reviewer2])
    for user in (reviewer, reviewer2):
        for p in task.pairs.order_by("index"):
            task.refresh_from_db()
            assert task.is_open
            blind.verdict_record(pair=p, reviewer=user, choice="tie")
    task.refresh_from_db()
    assert not task.is_open and task.closed_at is not None
    with pytest.raises(ApplicationError, match="closed"):
        blind.verdict_record(pair=task.pairs.first(), reviewer=reviewer, choice="left")


def test_one_api_judges_an_arena_and_a_human_evaluation_alike(project, reviewer, api_for):
    for source in (BlindSource.ARENA, BlindSource.PERIODIC, BlindSource.CHECKPOINT):
        task = make_task(project, source=source, responses=[("a0", "b0"), ("a1", "b1")])
        url = f"/api/projects/{project.slug}/monitor/blind/{task.pk}/"
        api = api_for(reviewer)
        first = api.get(url + "next/").json()
        assert first["index"] == 0 and {first["left"], first["right"]} == {"a0", "b0"} and first["to_judge"] == 2
        r = api.post(url + "verdicts/", {"pair": first["pair"], "choice": "both_bad"}, format="json").json()
        assert r == {"saved": True, "next": task.pairs.get(index=1).pk, "closed": False}
        assert api.post(url + "verdicts/", {"pair": first["pair"], "choice": "a"}, format="json").status_code == 400
        assert api.get(url + "next/").json()["your_verdict"] is None
        listed = api.get(f"/api/projects/{project.slug}/monitor/blind/?source={source}").json()["tasks"]
        assert [t["id"] for t in listed] == [task.pk] and listed[0]["mine"] == {"judged": 1, "to_judge": 2}
