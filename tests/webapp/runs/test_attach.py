"""Attaching a VERL run the app did not launch (written by VERL's own writers): a read-only run follows it live —
curves, samples, checkpoints — its health rules only warn, its folder is never written to, a rollback from one
of its checkpoints starts an app-owned VERL child that resumes from it; folders outside the project's approved
root are refused; TRL's completion tables become rollout-store rows."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.external_runs import VerlRun, write_trl_run
from training import external, ingest
from webapp.core.services import ApplicationError
from webapp.runs.models import Checkpoint, Job, JobState, MetricPoint, RunEvent
from webapp.runs.services import attach
from webapp.runs.services.sync import sync_job

pytestmark = pytest.mark.django_db
PROMPTS, TRUTH = ["1+2=", "3+4="], ["3", "7"]


@pytest.fixture
def ext_root(tmp_path, settings, monkeypatch):
    root = tmp_path / "external"
    settings.ATTACH_ROOTS = [str(root)]
    monkeypatch.setattr(attach, "SETTLE_S", 0.0)
    return root


def _verl_steps(run: VerlRun, steps, kl=0.01) -> None:
    for s in steps:
        run.step(s, {"critic/score/mean": 0.1 * s, "actor/kl_loss": kl, "actor/entropy": 1.2,
                     "training/rollout_probs_diff_mean": 0.002}, PROMPTS, [["3", "4"], ["7", "7"]], TRUTH)


def _points(job, name) -> dict[int, float]:
    return dict(MetricPoint.objects.filter(job=job, name=name).values_list("step", "value"))


def test_a_verl_run_is_followed_live_read_only_and_rolled_back_into_an_app_run(
        ext_root, project, engineer, tiny_model, tiny_model_dir, prompts_version, reward_fn, no_enqueue,
        fake_supervisor, monkeypatch):
    from webapp.monitoring.services import job_rollback
    from webapp.runs.services import job_launch

    run = VerlRun(ext_root / project.slug / "gsm8k-run1", tiny_model_dir)
    _verl_steps(run, [1, 2])
    run.validate(2, PROMPTS, ["3", "8"], TRUTH)
    ckpt_dir = run.checkpoint(2)
    run.settle()
    layout = external.detect(run.root)
    assert (layout.format, layout.metrics, layout.checkpoints, layout.rollout, layout.val, layout.hydra) == (
        "verl", "logs/gsm8k_grpo/qwen_run1.jsonl", "checkpoints", "rollouts", "val_generations",
        "outputs/.hydra/config.yaml")
    before = run.snapshot()

    job = attach.attach_run(project=project, user=engineer, path=str(run.root), name="by hand",
                            base_model=tiny_model, dataset_version=prompts_version,
                            reward_version=reward_fn.latest_version)
    assert run.snapshot() == before  # following never writes into the folder
    assert job.is_attached and job.state == JobState.RUNNING and job.backend == "verl"
    assert Path(job.run_dir).parent == project.runs_root and not str(job.run_dir).startswith(str(run.root))
    assert _points(job, "critic/score/mean") == pytest.approx({1: 0.1, 2: 0.2})
    assert _points(job, "critic/zero_variance_group_share") == {1: 0.5, 2: 0.5}  # derived from VERL's dumps
    rows = ingest.read_samples(job.run_dir, "rollout", 2)
    assert sorted(r["output"] for r in rows) == ["3", "4", "7", "7"] and len({r["uid"] for r in rows}) == 2
    assert ingest.sample_steps(job.run_dir, "val") == [2]
    [ckpt] = Checkpoint.objects.filter(job=job)
    assert (ckpt.step, ckpt.path) == (2, str(ckpt_dir.resolve()))
    assert RunEvent.objects.filter(job=job, kind="attached").exists()

    # live: VERL goes on; its KL climbs above the kl rule's 0.1 for three steps
    _verl_steps(run, [3, 4, 5], kl=0.5)
    run.checkpoint(4)
    run.settle()
    before = run.snapshot()
    sync_job(job)
    sync_job(job)
    assert run.snapshot() == before
    job.refresh_from_db()
    assert sorted(_points(job, "actor/kl_loss")) == [1, 2, 3, 4, 5] and job.last_step == 5
    assert sorted(Checkpoint.objects.filter(job=job).values_list("step", flat=True)) == [2, 4]
    assert ingest.sample_steps(job.run_dir, "rollout") == [1, 2, 3, 4, 5]
    trips = RunEvent.objects.filter(job=job, kind="guard_rule")
    assert trips.filter(data__rule="kl").exists(), list(trips.values_list("message", flat=True))
    assert {t.data.get("action") for t in trips} == {"warn"}
    assert job.state == JobState.RUNNING and Job.objects.count() == 1  # warned only: no restore, no child
    with pytest.raises(ApplicationError, match="cannot be resumed here"):
        from webapp.runs.services import job_resume
        job_resume(job=job, user=engineer)

    # a rollback from its checkpoint is an app-owned VERL run resuming from the external folder
    child = job_rollback(job=job, step=2, user=engineer, reason="KL blew up after 2")
    assert child.parent_id == job.pk and not child.is_attached and child.backend == "verl"
    assert child.resume_checkpoint.path == str(ckpt_dir.resolve()) and child.data_manifest["counts"]["train"] > 0
    assert child.config.get("guard_rules") != attach.WARN_RULES  # its own preset's rules, not the warn-only ones
    job_launch(child.pk)
    child.refresh_from_db()
    launch = json.loads((Path(child.run_dir) / "attempts" / "1" / "launch.json").read_text())
    assert f"trainer.resume_from_path={ckpt_dir.resolve()}" in launch["argv"]
    assert run.snapshot() == before

    # its diagnostic bundle carries the external Hydra config and the followed curves
    import zipfile

    from webapp.monitoring.services.bundle import build_bundle

    with zipfile.ZipFile(build_bundle(job, name="attached").path) as zf:
        assert "adv_estimator: grpo" in zf.read("attached/hydra/config.yaml").decode()
        assert [line.split(",")[0] for line in zf.read("metrics.csv").decode().splitlines()[1:]] == list("12345")
        assert json.loads(zf.read("attached.json"))["layout"]["format"] == "verl"
    assert run.snapshot() == before

    attach.stop_following(job=job, user=engineer)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and sync_job(job) == []


def test_only_the_projects_own_folder_under_an_approved_root_can_be_attached(ext_root, project, engineer, settings,
                                                                            tiny_model_dir):
    from webapp.core.models import Project

    other = Project.objects.create(slug="rival", name="Rival")
    theirs = VerlRun(ext_root / other.slug / "secret-run", tiny_model_dir)
    _verl_steps(theirs, [1])
    link = ext_root / project.slug / "looks-mine"
    link.parent.mkdir(parents=True)
    link.symlink_to(theirs.root)
    runs = Path(settings.RUNS_ROOT) / project.slug
    runs.mkdir(parents=True, exist_ok=True)
    refusals = [str(theirs.root), str(link), str(ext_root / project.slug / "missing"), str(runs)]
    messages = set()
    for path in refusals:
        with pytest.raises(ApplicationError) as err:
            attach.attach_run(project=project, user=engineer, path=path)
        messages.add(err.value.message.replace(path, "<path>"))
    assert len(messages) == 1 and "approved folders" in messages.pop()  # the same words: nothing is revealed
    with pytest.raises(ApplicationError, match="absolute path"):
        attach.attach_run(project=project, user=engineer, path="relative/run")
    empty = ext_root / project.slug / "empty"
    empty.mkdir()
    with pytest.raises(ApplicationError, match="holds no VERL file-logger JSONL"):
        attach.attach_run(project=project, user=engineer, path=str(empty))
    settings.ATTACH_ROOTS = []
    with pytest.raises(ApplicationError, match="ATTACH_ROOTS"):
        attach.attach_run(project=project, user=engineer, path=str(theirs.root))
    assert not Job.objects.exists()


def test_a_trl_runs_completion_tables_become_the_rollout_store(ext_root, project, engineer):
    out = write_trl_run(ext_root / project.slug / "trl-grpo", {
        1: [("1+2=", "3", 1.0, 0.5), ("1+2=", "4", 0.0, -0.5), ("3+4=", "7", 1.0, 0.0), ("3+4=", "7", 1.0, 0.0)],
        2: [("1+2=", "3", 1.0, 0.0), ("1+2=", "3", 1.0, 0.0), ("3+4=", "8", 0.0, -0.7), ("3+4=", "7", 1.0, 0.7)]})
    job = attach.attach_run(project=project, user=engineer, path=str(out))
    assert (job.attached["layout"]["format"], job.attached["layout"]["completions"]) == ("trl", "completions")
    rows = ingest.read_samples(job.run_dir, "rollout", 2)
    assert [(r["input"], r["output"], r["score"], r["advantage"]) for r in rows][2] == ("user: 3+4=", "assistant: 8",
                                                                                       0.0, -0.7)
    assert rows[0]["components"] == {"accuracy_reward": 1.0} and len({r["uid"] for r in rows}) == 2
    assert _points(job, "critic/score/mean") == {1: 0.75, 2: 0.75}  # TRL's logged reward under our name
    assert _points(job, "reward/accuracy_reward/mean") == {1: 0.75, 2: 0.75}  # derived from the tables
    assert _points(job, "critic/zero_variance_group_share") == {1: 0.5, 2: 0.5}
    assert not Checkpoint.objects.filter(job=job).exists()
    # imported for re-scoring: TRL's completions scored again by a reward written here, in the sandbox
    from webapp.rewards.services import reward_function_create
    from webapp.runs.models import RescoreSample
    from webapp.runs.services.rescore import rescore_create, rescore_execute

    says_seven = reward_function_create(project=project, user=engineer, name="says-seven", source=(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(solution_str.strip().endswith('7'))\n"))
    rescore = rescore_create(job=job, user=engineer, version=says_seven.latest_version, queue=False)
    rescore = rescore_execute(rescore_id=rescore.pk)
    assert rescore.state == "succeeded" and rescore.done_count == 8, rescore.error
    got = {(r.step, r.row): (r.old_score, r.new_score) for r in RescoreSample.objects.filter(rescore=rescore)}
    assert got[(2, 2)] == (0.0, 0.0) and got[(2, 3)] == (1.0, 1.0) and got[(1, 0)] == (1.0, 0.0)


def test_attach_through_the_api_the_cli_and_the_page(ext_root, project, engineer, viewer, api_for, as_user):
    import io

    from django.core.management import CommandError, call_command

    steps = {1: [("1+2=", "3", 1.0, 0.0), ("1+2=", "3", 1.0, 0.0)]}
    api = api_for(engineer)
    one = write_trl_run(ext_root / project.slug / "one", steps)
    assert api_for(viewer).post(f"/api/projects/{project.slug}/jobs/attach/", {"path": str(one)},
                                format="json").status_code == 403
    r = api.post(f"/api/projects/{project.slug}/jobs/attach/", {"path": str(one), "name": "trl one"}, format="json")
    assert r.status_code == 201 and r.json()["attached_dir"] == str(one.resolve()) and r.json()["state"] == "running"
    bad = api.post(f"/api/projects/{project.slug}/jobs/attach/", {"path": "/etc"}, format="json")
    assert bad.status_code == 400 and bad.json()["field"] == "path"
    stop = api.post(f"/api/projects/{project.slug}/jobs/{r.json()['id']}/attach/stop/")
    assert stop.status_code == 200 and stop.json()["state"] == "succeeded"

    two = write_trl_run(ext_root / project.slug / "two", steps)
    out = io.StringIO()
    call_command("attach_run", str(two), "--project", project.slug, "--user", engineer.username, stdout=out)
    assert "TRL completion tables in completions/" in out.getvalue() and "(read-only): step 1" in out.getvalue()
    with pytest.raises(CommandError, match="approved folders"):
        call_command("attach_run", "/tmp", "--project", project.slug, "--user", engineer.username)

    three = write_trl_run(ext_root / project.slug / "three", steps)
    c = as_user(engineer)
    form = c.get(f"/p/{project.slug}/jobs/attach/").content.decode()
    assert f"{ext_root.resolve()}/{project.slug}/" in form and "Attach and follow" in form
    page = c.post(f"/p/{project.slug}/jobs/attach/", {"path": str(three)}, follow=True).content.decode()
    job = Job.objects.get(attached_dir=str(three.resolve()))
    assert "Attached, read-only" in page and "Stop following" in page and "cannot be rolled back" in page
    assert as_user(viewer).get(f"/p/{project.slug}/jobs/attach/").status_code == 403
    done = c.post(f"/p/{project.slug}/jobs/{job.pk}/attach/stop/", follow=True).content.decode()
    assert "no longer followed" in done and "Stop following" not in done
