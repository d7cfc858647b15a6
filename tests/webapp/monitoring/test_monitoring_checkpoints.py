"""Promote, roll back (lineage), retention and protected.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from webapp.core.models import AuditLog, Project
from webapp.core.services import ApplicationError
from webapp.monitoring import selectors
from webapp.monitoring.services import (
    checkpoint_promote,
    job_rollback,
    parse_hp_overrides,
    protected_steps,
    retention_apply,
    write_protected,
)
from webapp.runs.models import Checkpoint, CheckpointStatus, Job, JobAttempt, JobState, RunEvent

pytestmark = pytest.mark.django_db


def test_promote_moves_the_alias_and_deletes_nothing(make_job, checkpoint, engineer, project,
                                                     django_capture_on_commit_callbacks):
    job = make_job()
    c5, c10 = checkpoint(job, 5), checkpoint(job, 10)
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_promote(checkpoint=c5, user=engineer)
        checkpoint_promote(checkpoint=c10, user=engineer)
    project.refresh_from_db()
    c5.refresh_from_db()
    assert project.active_checkpoint == c10 and c5.promoted  # the old one stays promoted and on disk
    assert Path(c5.path).is_dir() and Path(c10.path).is_dir()
    entry = AuditLog.objects.filter(action="checkpoint.promote").first()
    assert entry.actor == engineer and entry.before["active_checkpoint"]["step"] == 5
    assert entry.after["active_checkpoint"]["step"] == 10
    assert RunEvent.objects.filter(job=job, kind="promote").count() == 2
    assert json.loads((Path(job.run_dir) / "checkpoints" / "protected.json").read_text()) == [5, 10]
    with pytest.raises(ApplicationError, match="already the active policy"):
        checkpoint_promote(checkpoint=c10, user=engineer)


def test_promote_refuses_a_deleted_checkpoint(make_job, checkpoint, engineer):
    job = make_job()
    c = checkpoint(job, 5)
    Checkpoint.objects.filter(pk=c.pk).update(status=CheckpointStatus.DELETED)
    c.refresh_from_db()
    with pytest.raises(ApplicationError, match="cannot be promoted"):
        checkpoint_promote(checkpoint=c, user=engineer)


@pytest.mark.parametrize("raw, expected", [
    (None, {}), ({"lr": "5e-7", "kl_coef": ""}, {"lr": 5e-7}), (["lr=1e-4", "kl_coef=0.04"], {"lr": 1e-4,
                                                                                             "kl_coef": 0.04}),
])
def test_parse_hp_overrides(raw, expected):
    assert parse_hp_overrides(raw) == expected


@pytest.mark.parametrize("raw, message", [
    ({"batch_size": 4}, "cannot be changed"), ({"lr": "fast"}, "must be a number"), ({"lr": 0}, "positive"),
    ({"kl_coef": -1}, "positive"), (["lr"], "NAME=VALUE"), ({"lr": "inf"}, "positive"),
])
def test_bad_hp_overrides_are_refused(raw, message):
    with pytest.raises(ApplicationError, match=message):
        parse_hp_overrides(raw)


def test_rollback_branches_a_child_from_the_chosen_step(launched_job, checkpoint, engineer, project,
                                                        django_capture_on_commit_callbacks):
    parent = launched_job()
    Job.objects.filter(pk=parent.pk).update(last_step=20)
    parent.refresh_from_db()
    c10, c15, c20 = checkpoint(parent, 10), checkpoint(parent, 15), checkpoint(parent, 20)
    Project.objects.filter(pk=project.pk).update(active_checkpoint=c20)
    with django_capture_on_commit_callbacks(execute=True):
        child = job_rollback(job=parent, step=10, user=engineer, reason="KL blew up after 12",
                             hp_overrides={"lr": "5e-4"})
    child.refresh_from_db()
    assert child.parent == parent and child.resume_checkpoint == c10
    assert child.config["hp"]["lr"] == 5e-4 and parent.config["hp"]["lr"] == 1e-3
    # the parent and its later checkpoints stay
    assert {c.step for c in parent.checkpoints.filter(status=CheckpointStatus.AVAILABLE)} == {10, 15, 20}
    assert Path(c15.path).is_dir() and Path(c20.path).is_dir()
    # the run's active policy returns to the chosen checkpoint
    project.refresh_from_db()
    assert project.active_checkpoint == c10
    # one audit entry: who, from which step to which, why
    [entry] = AuditLog.objects.filter(action="job.rollback")
    assert entry.actor == engineer and entry.before["step"] == 20 and entry.after["step"] == 10
    assert entry.after["reason"] == "KL blew up after 12" and "from step 20 to step 10" in entry.summary
    ev = RunEvent.objects.get(job=parent, kind="rollback")
    assert ev.step == 10 and ev.data["child_job"] == child.pk and "KL blew up" in ev.message
    assert RunEvent.objects.filter(job=child, kind="rollback", step=10).exists()
    assert 10 in json.loads((Path(parent.run_dir) / "checkpoints" / "protected.json").read_text())
    # the lineage tree shows the branch step
    tree = selectors.lineage(child)
    assert tree.job == parent and tree.children[0].job == child and tree.children[0].branch_step == 10
    assert tree.children[0].current


def test_rollback_can_stop_the_parent_and_refuses_bad_steps(launched_job, checkpoint, engineer):
    parent = launched_job()
    checkpoint(parent, 10)
    with pytest.raises(ApplicationError, match=r"no checkpoint at step 7 \(available: 10\)"):
        job_rollback(job=parent, step=7, user=engineer)
    with pytest.raises(ApplicationError, match="cannot be changed"):
        job_rollback(job=parent, step=10, user=engineer, hp_overrides={"epochs": 9})
    job_rollback(job=parent, step=10, user=engineer, stop_parent=True)
    parent.refresh_from_db()
    assert parent.cancel_requested


def test_protected_steps_cover_promoted_alias_children_and_live_resumes(make_job, checkpoint, project):
    from tests.webapp.monitoring.conftest import default_config

    job = make_job(config={**default_config(), "guard_rules": []})  # the guard's own target: test_monitoring_guard
    c = {s: checkpoint(job, s) for s in (5, 10, 15, 20, 25, 30)}
    Checkpoint.objects.filter(pk=c[5].pk).update(promoted=True)
    Project.objects.filter(pk=project.pk).update(active_checkpoint=c[10])
    make_job("child", parent=job, resume_checkpoint=c[15])
    JobAttempt.objects.create(job=job, number=2, reason="guard_rule", resume_from=c[20].path, state=JobState.RUNNING)
    assert protected_steps(job) == {5, 10, 15, 20}
    assert write_protected(job) == {5, 10, 15, 20}
    assert json.loads((Path(job.run_dir) / "checkpoints" / "protected.json").read_text()) == [5, 10, 15, 20]


def test_retention_keeps_last_k_and_never_deletes_a_used_checkpoint(make_job, checkpoint, project):
    job = make_job(state=JobState.SUCCEEDED)  # keep_last_k = 2
    c = {s: checkpoint(job, s) for s in (5, 10, 15, 20, 25, 30)}
    Checkpoint.objects.filter(pk=c[5].pk).update(promoted=True)
    Project.objects.filter(pk=project.pk).update(active_checkpoint=c[10])
    make_job("child", parent=job, resume_checkpoint=c[15])
    deleted = retention_apply(job=job)
    assert deleted == [20]
    status = dict(Checkpoint.objects.filter(job=job).values_list("step", "status"))
    assert status == {5: "available", 10: "available", 15: "available", 20: "deleted", 25: "available",
                      30: "available"}
    assert not Path(c[20].path).exists() and all(Path(c[s].path).is_dir() for s in (5, 10, 15, 25, 30))
    assert RunEvent.objects.get(job=job, kind="retention").data["deleted"] == [20]
    assert retention_apply(job=job) == []  # idempotent


def test_retention_waits_for_the_run_to_finish(make_job, checkpoint):
    job = make_job(state=JobState.RUNNING)
    for s in (5, 10, 15, 20):
        checkpoint(job, s)
    assert retention_apply(job=job) == []
    assert Checkpoint.objects.filter(job=job, status=CheckpointStatus.AVAILABLE).count() == 4


def test_retention_refuses_paths_outside_the_run(make_job, checkpoint, tmp_path):
    job = make_job(state=JobState.SUCCEEDED)
    outside = tmp_path / "elsewhere" / "global_step_1"
    outside.mkdir(parents=True)
    Checkpoint.objects.create(job=job, step=1, path=str(outside))
    for s in (5, 10, 15):
        checkpoint(job, s)
    assert retention_apply(job=job) == [5]
    assert outside.is_dir()


def test_a_retention_sweep_takes_the_same_few_queries_for_200_checkpoints(make_job, checkpoint,
                                                                          django_assert_max_num_queries):
    job = make_job(state=JobState.SUCCEEDED)  # keep_last_k = 2
    for s in range(1, 201):
        checkpoint(job, s)
    with django_assert_max_num_queries(25):  # not one per deleted checkpoint
        deleted = retention_apply(job=job)
    assert deleted == list(range(1, 199))
    assert set(Checkpoint.objects.filter(job=job, status=CheckpointStatus.DELETED).values_list("step", flat=True)) \
        == set(range(1, 199))
    assert sorted(p.name for p in (Path(job.run_dir) / "checkpoints").glob("global_step_*")) == \
        ["global_step_199", "global_step_200"]


def test_a_checkpoint_whose_folder_is_gone_is_listed_missing_and_not_offered(launched_job, checkpoint, engineer,
                                                                            as_user, api_for):
    """Retention can remove a folder between two syncs of the run: the table, the run page and the API read the
    disk, so the gone step is offered nowhere, and a rollback already on its way is refused naming the steps there
    are."""
    import shutil

    parent = launched_job()
    checkpoint(parent, 5)
    checkpoint(parent, 10)
    shutil.rmtree(Checkpoint.objects.get(job=parent, step=5).path)
    slug = parent.project.slug
    body = as_user(engineer).get(f"/p/{slug}/monitor/jobs/{parent.pk}/checkpoints/").content.decode()
    assert 'data-step="10"' in body and 'data-step="5"' not in body
    row_5 = body[body.index('<th scope="row">5</th>'):]
    assert "Missing on disk" in row_5[:row_5.index("</tr>")]
    run_page = as_user(engineer).get(f"/p/{slug}/jobs/{parent.pk}/").content.decode()
    register = run_page[run_page.index('id="register-step"'):]
    register = register[:register.index("</select>")]  # "Register a checkpoint as a model" offers what is there
    assert '<option value="10">' in register and '<option value="5">' not in register
    listed = api_for(engineer).get(f"/api/projects/{slug}/monitor/jobs/{parent.pk}/checkpoints/").json()
    assert {c["step"]: c["status"] for c in listed["checkpoints"]} == {5: "missing", 10: "available"}
    page = as_user(engineer).post(f"/p/{slug}/monitor/jobs/{parent.pk}/checkpoints/5/rollback/", {"reason": "x"},
                                  follow=True)
    shown = [str(m) for m in page.context["messages"]]
    assert any("step 5 is missing on disk" in m and "(available: 10)" in m for m in shown), shown
    assert not Job.objects.filter(parent=parent).exists()
