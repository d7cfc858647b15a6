"""Periodic human evaluation: a blind task for every N-th checkpoint (once, however often the run syncs), assigned
to the project's reviewers, and the reward-vs-human gap flag (checked when the task closes)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from webapp.core import queue
from webapp.monitoring import selectors
from webapp.monitoring.hooks import after_sync
from webapp.monitoring.models import BlindTask
from webapp.monitoring.services import gap_check, schedule_process, verdict_record
from webapp.monitoring.services.blind import left_side, new_pair
from webapp.monitoring.services.periodic import open_assigned, reviewers
from webapp.notifications.models import Delivery, Hook
from webapp.runs.models import RunEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr("webapp.monitoring.services.periodic.enqueue",
                        lambda task, *args, queue="cpu": calls.append((task, *args)))
    return calls


def as_generated(task, rows: list[dict]) -> BlindTask:
    """What the worker leaves (services/generation.py): the pairs stored, side B the policy; then the task opens."""
    from webapp.monitoring.models import BlindPair

    BlindPair.objects.bulk_create([
        new_pair(task, i, response_a=r["other"], response_b=r["policy"], prompt=r["prompt"], prompt_text=r["prompt"],
                 ground_truth=r.get("ground_truth")) for i, r in enumerate(rows)])
    BlindTask.objects.filter(pk=task.pk).update(status="succeeded", progress=1.0)
    task.refresh_from_db()
    return open_assigned(task)


def scheduled_job(make_job, **schedule):
    config = {"hp": {"lr": 1e-3}, "human_eval": {"every": 2, "items": 3, **schedule}}
    job = make_job(config=config)
    val = Path(job.run_dir) / "data" / "val.jsonl"
    val.parent.mkdir(parents=True, exist_ok=True)
    val.write_text("".join(json.dumps({"prompt": f"{i}+1=", "ground_truth": str(i + 1)}) + "\n" for i in range(5)))
    return job


def test_every_second_checkpoint_gets_one_task_however_often_the_run_syncs(
        make_job, checkpoint, sent, django_capture_on_commit_callbacks):
    job = scheduled_job(make_job)
    for step in (5, 10, 15):
        checkpoint(job, step)
    with django_capture_on_commit_callbacks(execute=True):
        first = schedule_process(job)
        after_sync(job, [])  # the job_synced hook: nothing new
        schedule_process(job)
    assert [t.b_checkpoint.step for t in first] == [10]
    checkpoint(job, 20)
    with django_capture_on_commit_callbacks(execute=True):
        after_sync(job, [])
        after_sync(job, [])
    tasks = BlindTask.objects.filter(b_checkpoint__job=job, source="periodic").order_by("b_checkpoint__step")
    assert [(t.b_checkpoint.step, t.opponent_step, t.opponent) for t in tasks] == [(10, 5, "step 5"),
                                                                                  (20, 10, "step 10")]
    assert all(t.status == "queued" and not t.is_open for t in tasks)
    assert sent == [(queue.PREPARE_HUMAN_EVAL, t.pk) for t in tasks]  # one generation each
    prompts = tasks[0].prompts
    assert len(prompts) == 3 and prompts[0]["prompt"] == "0+1="  # held out: the run's val split
    assert prompts[0]["ground_truth"] == "1"


def test_no_schedule_no_tasks_and_against_base(make_job, checkpoint, sent, tiny_model_dir, project):
    from webapp.registry.models import ModelEntry

    plain = make_job()
    checkpoint(plain, 5)
    assert schedule_process(plain) == []
    job = scheduled_job(make_job, every=1, against="base")
    job.base_model = ModelEntry.objects.create(project=project, name="tiny", path=str(tiny_model_dir))
    job.save()
    checkpoint(job, 5)
    (task,) = schedule_process(job)
    assert (task.opponent, task.opponent_step) == ("base model", 0)


def test_filled_task_is_assigned_to_the_reviewers_and_notified(make_job, checkpoint, sent, project, reviewer,
                                                                reviewer2, engineer):
    hook = Hook.objects.create(project=project, name="team", kind="json", url="http://127.0.0.1:9/", events=[])
    job = scheduled_job(make_job, every=1)
    checkpoint(job, 5)
    (task,) = schedule_process(job)
    assert set(reviewers(project)) == {reviewer, reviewer2}  # reviewers, not the engineer
    as_generated(task, [{"prompt": "1+1=", "policy": "2", "other": "3", "ground_truth": "2"},
                        {"prompt": "2+2=", "policy": "4", "other": "4"}])
    task.refresh_from_db()
    assert task.is_open and task.status == "succeeded" and task.pairs.count() == 2
    assert set(task.assignees.all()) == {reviewer, reviewer2} and not task.anyone_may_judge
    pair = task.pairs.get(index=0)
    assert pair.response_b == "2" and pair.response_a == "3" and pair.ground_truth == "2"  # B: the policy
    assert task.pairs.get(index=1).identical  # "4" vs "4": a tie, not shown to reviewers
    assert not task.judge_runs.exists()  # a run without a reward: no automatic judge
    delivery = Delivery.objects.get(hook=hook, event="human_eval.assigned")
    assert set(delivery.payload["data"]["reviewers"]) == {"rita", "rob"}


def _judged_task(make_job, checkpoint, points, sent, reviewer, rewards, choice_for_policy):
    job = scheduled_job(make_job, every=1, reward_rise=0.2)
    points(job, "critic/score/mean", rewards)  # steps 1..len
    checkpoint(job, 5)
    checkpoint(job, 10)
    schedule_process(job)
    task = BlindTask.objects.get(b_checkpoint__job=job, b_checkpoint__step=10)
    as_generated(task, [{"prompt": f"q{i}", "policy": f"new {i}", "other": f"old {i}"} for i in range(10)])
    pairs = list(task.pairs.all())
    for pair in pairs:
        side = {"policy": "b", "other": "a"}.get(choice_for_policy)
        choice = "tie" if side is None else ("left" if left_side(pair, reviewer) == side else "right")
        task.refresh_from_db()
        assert task.is_open and not task.gap  # blind until the last verdict: no gap computed, nothing flagged
        verdict_record(pair=pair, reviewer=reviewer, choice=choice)
    task.refresh_from_db()  # the only assignee judged every pair: the task closed itself and checked the gap
    assert not task.is_open
    return job, task


def test_reward_up_people_prefer_the_older_checkpoint_is_flagged_once(make_job, checkpoint, points, sent, reviewer,
                                                                       project):
    Hook.objects.create(project=project, name="team", kind="json", url="http://127.0.0.1:9/", events=[])
    rewards = [0.1] * 5 + [0.9] * 5  # mean of the last 5 up to step 5: 0.1; up to step 10: 0.9
    job, task = _judged_task(make_job, checkpoint, points, sent, reviewer, rewards, "other")
    gap = task.gap
    assert gap["rise"] == pytest.approx(0.8) and gap["human_rate"] == 0.0 and gap["human_hi"] < 0.5
    assert gap["flagged"] and task.flagged_at is not None
    gap_check(task)  # checked again: still flagged, logged and notified only once
    assert RunEvent.objects.filter(job=job, kind="reward_gap").count() == 1
    assert Delivery.objects.filter(event="human_eval.gap").count() == 1
    flags = selectors.reward_gap_flags(job)
    assert [t.pk for t in flags["flagged"]] == [task.pk] and "wholly below 0.5" in flags["rule"]
    human = selectors.win_rate_marks(job)["human"]
    assert human[0]["flagged"] and human[0]["opponent"] == "step 5" and human[0]["losses"] == 10


@pytest.mark.parametrize("rewards, choice", [
    ([0.1] * 5 + [0.9] * 5, "policy"),   # the reward rose and people agree: no flag
    ([0.5] * 10, "other"),                # people prefer the older one but the reward did not rise: no flag
    ([0.1] * 5 + [0.9] * 5, "tie"),       # all ties: a rate of 0.5, not below it
])
def test_no_flag_without_a_gap(make_job, checkpoint, points, sent, reviewer, rewards, choice):
    _job, task = _judged_task(make_job, checkpoint, points, sent, reviewer, rewards, choice)
    assert not task.gap["flagged"] and task.flagged_at is None


def test_the_worker_generates_both_sides_and_opens_the_task(make_job, tiny_model_dir, project, reviewer, sent):
    """The real pair generator (a subprocess, the demo model): a checkpoint vs the base on the val prompts."""
    import shutil

    from webapp.monitoring.services import human_eval_prepare
    from webapp.registry.models import ModelEntry
    from webapp.runs.models import Checkpoint

    job = scheduled_job(make_job, every=1, against="base", items=2, max_response_length=4)
    job.base_model = ModelEntry.objects.create(project=project, name="tiny", path=str(tiny_model_dir))
    job.save()
    ckpt = Path(job.run_dir) / "checkpoints" / "global_step_5"
    shutil.copytree(tiny_model_dir, ckpt / "model")
    (ckpt / "manifest.json").write_text(json.dumps({"step": 5, "format": "local", "lora": False}))
    Checkpoint.objects.create(job=job, step=5, path=str(ckpt))
    (task,) = schedule_process(job)
    task = human_eval_prepare(task_id=task.pk)
    assert task.status == "succeeded", task.error
    assert task.is_open and list(task.assignees.all()) == [reviewer]
    pairs = list(task.pairs.order_by("index"))
    assert [p.prompt_text for p in pairs] == ["0+1=", "1+1="] and pairs[0].ground_truth == "1"
    assert pairs[0].response_b == pairs[0].response_a  # the same weights, greedy: the same answer
    assert pairs[0].identical  # recorded as a tie, never shown to the reviewer
    assert human_eval_prepare(task_id=task.pk).pairs.count() == 2  # a redelivered task does nothing


def test_a_generation_failure_is_shown_on_the_task(make_job, checkpoint, project, sent, tmp_path):
    from webapp.monitoring.services import human_eval_prepare
    from webapp.registry.models import ModelEntry

    job = scheduled_job(make_job, every=1, against="base")
    job.base_model = ModelEntry.objects.create(project=project, name="empty", path=str(tmp_path))
    job.save()
    checkpoint(job, 5)  # a fake model folder: nothing can load it
    (task,) = schedule_process(job)
    task = human_eval_prepare(task_id=task.pk)
    assert task.status == "failed" and task.error and not task.is_open and task.pairs.count() == 0


def test_the_runs_reward_judges_a_scheduled_task_automatically(make_job, checkpoint, sent, monkeypatch,
                                                              django_capture_on_commit_callbacks):
    judged = []
    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda name, *a, queue="cpu": judged.append(
        (name, *a)))
    job = scheduled_job(make_job, every=1)
    job.reward_spec = {"shaping": "raw", "components": [{"type": "function", "version_id": 1, "weight": 1.0}]}
    job.save()
    checkpoint(job, 5)
    (task,) = schedule_process(job)
    with django_capture_on_commit_callbacks(execute=True):
        as_generated(task, [{"prompt": "1+1=", "policy": "2", "other": "3", "ground_truth": "2"}])
    (run,) = task.judge_runs.all()
    assert run.kind == "reward" and judged == [(queue.RUN_JUDGE, run.pk)]


def test_an_opponent_gone_from_disk_fails_the_task_with_its_reason(make_job, checkpoint, sent):
    import shutil

    from webapp.monitoring.services import human_eval_prepare

    job = scheduled_job(make_job, every=1)
    first = checkpoint(job, 5)
    checkpoint(job, 10)
    tasks = schedule_process(job)
    task = next(t for t in tasks if t.b_checkpoint.step == 10)
    assert task.opponent == "step 5"
    shutil.rmtree(first.path)  # retention deleted it before a worker got to the task
    task = human_eval_prepare(task_id=task.pk)
    assert task.status == "failed" and "step 5" in task.error and "no longer on disk" in task.error


def test_checkpoints_a_scheduled_evaluation_needs_are_protected(make_job, checkpoint, sent):
    from webapp.monitoring.services import protected_steps

    job = scheduled_job(make_job, every=2)
    for step in (5, 10, 15, 20):
        checkpoint(job, step)
    schedule_process(job)  # tasks at 10 (vs 5) and 20 (vs 10), both still generating
    assert {5, 10, 20} <= protected_steps(job)
    BlindTask.objects.filter(b_checkpoint__job=job).update(status="succeeded")
    assert protected_steps(job) & {5, 10, 15, 20} == {20}  # the next evaluation compares with step 20
    job.state = "succeeded"
    job.save(update_fields=["state"])
    assert not protected_steps(job) & {5, 10, 15, 20}
