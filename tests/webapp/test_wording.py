"""Words that match the state: rollback dialog of a finished run, character counts, the review index."""
from __future__ import annotations

import json
import re

import pytest

from webapp.runs.models import Job, JobState


def _job(project, state):
    return Job.objects.create(project=project, name=f"{state} run", kind="grpo", state=state,
                              config={"hp": {"lr": 1e-3}, "total_steps": 10})


@pytest.mark.parametrize(("state", "offered"), [(JobState.RUNNING, True), (JobState.SUCCEEDED, False)])
def test_rollback_offers_to_stop_only_a_running_run(as_user, project, engineer, state, offered):
    job = _job(project, state)
    c = as_user(engineer)
    html = c.get(f"/p/acme/jobs/{job.pk}/").content.decode()
    assert ("still running" in html) is offered and ('name="stop_parent"' in html) is offered
    confirm = c.get(f"/p/acme/monitor/jobs/{job.pk}/checkpoints/10/rollback/").content.decode()
    assert ("still running" in confirm) is offered


def test_character_counts_are_labelled(as_user, project, engineer, tmp_path):
    from webapp.datasets.services import dataset_import

    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "abcd", "chosen": "x", "rejected": "yy"}) + "\n")
    version = dataset_import(project=project, user=engineer, name="pairs", path=path, split="0")
    c = as_user(engineer)
    base = f"/p/acme/datasets/{version.dataset_id}/v1/"
    rows = c.get(base).content.decode()
    assert "(4 chars)" in rows and "(1 char)" in rows and "(2 chars)" in rows
    row = c.get(base + "rows/0/").content.decode()
    assert "(4 characters)" in row and "(1 character)" in row and "(1 characters)" not in row


def test_review_index_says_a_reviewers_queue_in_one_way(as_user, project, reviewer):
    from tests.webapp.review.conftest import make_version
    from webapp.review import services

    fresh = make_version(project, name="fresh", rows=4)  # nobody opened it
    begun = make_version(project, name="begun", rows=4)
    services.ensure_pair_states(version=begun)  # opened by an engineer: counters exist, all at 0
    assert fresh.pk != begun.pk
    html = as_user(reviewer).get("/p/acme/review/").content.decode()
    for name in ("fresh", "begun"):
        cells = re.findall(r"<td>(.*?)</td>", html.split(f"<td>{name} v1</td>")[1].split("</tr>")[0], re.S)
        # pairs, decided, conflicts, flagged: numbers either way; the reviewer's own queue in the same words
        # whether or not an engineer opened the version first
        assert cells[:4] == ["4", "0", "0", "0"], cells
        assert cells[4] == "0 done · 4 left", cells


@pytest.mark.parametrize(("state", "errors", "words"), [
    ("succeeded", 0, "succeeded"), ("errors", 1, "1 error"), ("errors", 3, "3 errors"), ("failed", 0, "failed")])
def test_test_run_badge_words(state, errors, words):
    from webapp.rewards.models import RewardTestRun

    run = RewardTestRun(state=state, summary={"all": {"errors": errors}})
    assert run.state_words == words
