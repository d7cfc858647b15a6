"""Zero-signal dry runs: the request checks, the task with its progress, the version without the tied
prompts, and the same through the API and `manage.py zero_signal`."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from webapp.core.models import (
    AuditLog,
    Project,
)
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetRow
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.services import reward_function_create
from webapp.runs.models import ZeroSignalRun, ZeroSignalStatus
from webapp.runs.services import zero_signal as zs

# Ground truths 0-2 always score 1 (all right), 9-10 always 0 (all wrong); the others score by the
# response's text, so they tie only by chance.
TIE_REWARD = '''
import hashlib

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if ground_truth in ("0", "1", "2"):
        return 1.0
    if ground_truth in ("9", "10"):
        return 0.0
    return float(hashlib.sha256(solution_str.encode()).digest()[0] % 2)
'''


@pytest.fixture
def tie_reward(project):
    return reward_function_create(project=project, user=None, name="ties", source=TIE_REWARD).latest_version


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr(zs, "enqueue", lambda name, *args, **kw: calls.append((name, *args)))
    return calls


def forced(version, limit):
    rows = DatasetRow.objects.filter(version=version, index__lt=limit)
    return sorted(r.index for r in rows if r.ground_truth in ("0", "1", "2", "9", "10"))


def test_a_request_is_checked_then_queued_by_task_name(project, engineer, prompts_version, prefs_version, tiny_model,
                                                       tie_reward, sent, django_capture_on_commit_callbacks):
    def ask(**kw):
        args = {"version": prompts_version, "user": engineer, "model_id": tiny_model.pk,
                "reward_version_id": tie_reward.pk, **kw}
        return zs.dry_run_request(**args)

    with pytest.raises(ApplicationError, match="verifiable prompt set"):
        ask(version=prefs_version)
    with pytest.raises(ApplicationError, match="either a registered model or a checkpoint"):
        ask(model_id=None)
    other = Project.objects.create(slug="other", name="Other")
    foreign = ModelEntry.objects.create(project=other, name="x", kind=ModelKind.CAUSAL_LM, path=tiny_model.path)
    with pytest.raises(ApplicationError, match="causal language model of this project"):
        ask(model_id=foreign.pk)
    with pytest.raises(ApplicationError, match="reward function version"):
        ask(reward_version_id=None)
    with pytest.raises(ApplicationError, match="group size must be from 2"):
        ask(params={"group_size": 1})
    with pytest.raises(ApplicationError, match="temperature"):
        ask(params={"temperature": "0"})
    assert not ZeroSignalRun.objects.exists() and not sent
    with django_capture_on_commit_callbacks(execute=True):
        run = ask(params={"group_size": "3", "max_prompts": "10"})
    assert sent == [("jobs.tasks.zero_signal_dry_run", run.pk)]
    assert run.status == ZeroSignalStatus.QUEUED and run.params["group_size"] == 3 and run.params["max_prompts"] == 10
    assert AuditLog.objects.filter(action="dataset.zero_signal", object_id=str(prompts_version.pk)).exists()


@pytest.mark.slow
def test_the_task_samples_scores_reports_progress_and_the_new_version_drops_exactly_the_tied(
        project, engineer, prompts_version, tiny_model, tie_reward, sent):
    run = zs.dry_run_request(version=prompts_version, user=engineer, model_id=tiny_model.pk,
                             reward_version_id=tie_reward.pk,
                             params={"group_size": 4, "max_response_length": 3, "max_prompts": 40})
    seen: list[float] = []
    zs.dry_run_execute(run_id=run.pk, poll_s=0.005, on_progress=seen.append)  # 20 batches of 2 prompts
    run.refresh_from_db()
    assert run.status == ZeroSignalStatus.SUCCEEDED, run.error
    assert run.progress == 1.0 and seen == sorted(seen) and any(0 < f < 0.99 for f in seen), seen
    r = run.result
    tied = r["tied_indices"]
    assert r["prompts"] == r["counted"] == 40 and r["tied"] == len(tied)
    assert set(forced(prompts_version, 40)) <= set(tied)  # the prompts that always tie are listed
    assert r["tied_share"] == pytest.approx(len(tied) / 40)
    assert r["all_right"] >= len([i for i in forced(prompts_version, 40)
                                  if DatasetRow.objects.get(version=prompts_version, index=i).ground_truth in "012"])
    payload = zs.run_payload(run, batch=64)
    assert payload["effective_batch"] == pytest.approx(round(64 * (1 - r["tied_share"]), 1))
    assert zs.dry_run_execute(run_id=run.pk) is not None and ZeroSignalRun.objects.get(pk=run.pk).result == r

    new = zs.dry_run_derive(run=run, user=engineer)
    before = list(DatasetRow.objects.filter(version=prompts_version).order_by("index")
                  .values_list("index", "prompt_text", "ground_truth", "split"))
    after = list(DatasetRow.objects.filter(version=new).order_by("index")
                 .values_list("prompt_text", "ground_truth", "split"))
    assert after == [(p, g, s) for i, p, g, s in before if i not in set(tied)]
    assert new.parent_id == prompts_version.pk and new.lineage["operation"] == "zero-signal"
    assert new.lineage["rows_dropped"] == len(tied) and new.lineage["zero_signal_run"] == run.pk
    assert AuditLog.objects.filter(action="dataset.zero_signal_drop", object_id=str(new.pk)).exists()
    with pytest.raises(ApplicationError, match="already made"):
        zs.dry_run_derive(run=ZeroSignalRun.objects.get(pk=run.pk), user=engineer)


def test_a_run_whose_model_went_away_fails_with_the_reason(project, engineer, prompts_version, tiny_model,
                                                           tie_reward, sent):
    from jobs.tasks import zero_signal_dry_run

    run = zs.dry_run_request(version=prompts_version, user=engineer, model_id=tiny_model.pk,
                             reward_version_id=tie_reward.pk)
    tiny_model.delete()
    zero_signal_dry_run(run.pk)
    run.refresh_from_db()
    assert run.status == ZeroSignalStatus.FAILED and "deleted" in run.error
    with pytest.raises(ApplicationError, match="not finished"):
        zs.dry_run_derive(run=run, user=engineer)


def _finished(run, tied):
    run.status, run.result = ZeroSignalStatus.SUCCEEDED, {
        "prompts": 10, "counted": 10, "group_size": 4, "tied": len(tied), "tied_share": len(tied) / 10, "all_right": 1,
        "all_wrong": len(tied) - 1, "right_at": 0.5, "tied_indices": tied, "examples": []}
    run.save()
    return run


def test_the_api_queues_reads_and_derives(project, engineer, viewer, prompts_version, tiny_model, tie_reward, sent,
                                          api_for):
    url = f"/api/projects/{project.slug}/jobs/zero-signal/"
    client = api_for(engineer)
    bad = client.post(url, {"dataset": prompts_version.dataset.name, "model": tiny_model.pk,
                            "reward_version": tie_reward.pk, "group_size": 1}, format="json")
    assert bad.status_code == 400 and bad.json()["field"] == "group_size"
    old_name = client.post(url, {"dataset": prompts_version.dataset.name, "model": tiny_model.pk,
                                 "reward_version": tie_reward.pk, "n": 2}, format="json")
    assert old_name.status_code == 400 and old_name.json()["field"] == "n" and "group_size" in old_name.json()["detail"]
    resp = client.post(url, {"dataset": prompts_version.dataset.name, "model": tiny_model.pk,
                             "reward_version": tie_reward.pk, "group_size": 2}, format="json")
    assert resp.status_code == 202 and resp.json()["status"] == "queued"
    run = _finished(ZeroSignalRun.objects.get(pk=resp.json()["id"]), [1, 4, 7])
    got = api_for(viewer).get(f"{url}{run.pk}/?batch=50").json()
    assert got["summary"]["tied"] == 3 and got["effective_batch"] == 35.0 and got["tied_indices"] == [1, 4, 7]
    assert api_for(viewer).post(f"{url}{run.pk}/derive/").status_code == 403
    made = client.post(f"{url}{run.pk}/derive/")
    assert made.status_code == 201 and made.json()["row_count"] == prompts_version.row_count - 3
    assert client.post(f"{url}{run.pk}/derive/").status_code == 400


@pytest.mark.slow
def test_the_command_runs_a_dry_run_and_derives(project, engineer, prompts_version, tiny_model, tie_reward):
    out = StringIO()
    call_command("zero_signal", project.slug, prompts_version.dataset.name, "--model", "tiny", "--reward", "ties",
                 "--group-size", "2", "--max-response-length", "2", "--max-prompts", "12", "--batch", "10", "--derive",
                 "--user", engineer.username, stdout=out, stderr=StringIO())
    text = out.getvalue()
    run = ZeroSignalRun.objects.get()
    assert run.status == ZeroSignalStatus.SUCCEEDED and f"{run.result['tied']} of 12 prompts tie" in text
    assert "expected effective batch size" in text and f"without the {run.result['tied']:,} tied prompts" in text
    shown = StringIO()
    call_command("zero_signal", project.slug, "--show", str(run.pk), "--json", stdout=shown)
    assert json.loads(shown.getvalue())["derived_version"] == 2
    with pytest.raises(CommandError, match="no reward"):
        call_command("zero_signal", project.slug, prompts_version.dataset.name, "--model", "tiny", "--reward", "nope")


def test_the_quality_page_section_starts_follows_and_derives(project, engineer, viewer, prompts_version,
                                                             prefs_version, tiny_model, tie_reward, sent, as_user):
    from django.urls import reverse

    page = reverse("datasets-quality", args=[project.slug, prompts_version.dataset_id, prompts_version.number])
    html = as_user(engineer).get(page).content.decode()
    assert 'id="q-zero_signal"' in html and f'value="model:{tiny_model.pk}"' in html and "ties v1" in html
    prefs_page = reverse("datasets-quality", args=[project.slug, prefs_version.dataset_id, prefs_version.number])
    assert 'id="q-zero_signal"' not in as_user(engineer).get(prefs_page).content.decode()
    start = reverse("runs:zero-signal-start", args=[project.slug, prompts_version.pk])
    assert as_user(viewer).post(start, {"source": f"model:{tiny_model.pk}"}).status_code == 403
    refused = as_user(engineer).post(start, {"source": "", "reward_version": tie_reward.pk}, follow=True)
    assert "either a registered model or a checkpoint" in refused.content.decode()
    resp = as_user(engineer).post(start, {"source": f"model:{tiny_model.pk}", "reward_version": tie_reward.pk,
                                          "group_size": "3"})
    run = ZeroSignalRun.objects.get()
    assert resp.status_code == 302 and f"zs={run.pk}" in resp["Location"] and run.params["group_size"] == 3
    status = as_user(viewer).get(reverse("runs:zero-signal-status", args=[project.slug, run.pk])).json()
    assert status == {"status": "queued", "progress": 0.0, "finished": False, "error": ""}
    _finished(run, [0, 5])
    html = as_user(viewer).get(page + f"?zs={run.pk}&batch=10").content.decode()
    assert 'id="zs-tied">2<' in html and 'id="zs-effective-value">8.0<' in html and "zs-derive" not in html
    made = as_user(engineer).post(reverse("runs:zero-signal-derive", args=[project.slug, run.pk]))
    assert made.status_code == 302 and made["Location"].endswith("/v2/")
    assert DatasetRow.objects.filter(version__number=2, version__dataset=prompts_version.dataset).count() == \
        prompts_version.row_count - 2


def test_a_checkpoint_is_sampled_with_its_runs_base_model_as_tokenizer(project, engineer, prompts_version,
                                                                       tiny_model, tie_reward, sent, tmp_path):
    import shutil

    from webapp.runs.models import Checkpoint, Job, JobKind, JobState

    job = Job.objects.create(project=project, name="run", kind=JobKind.GRPO, state=JobState.SUCCEEDED, config={},
                             base_model=tiny_model)
    ckpt_dir = tmp_path / "global_step_5"
    shutil.copytree(tiny_model.path, ckpt_dir / "model")
    (ckpt_dir / "manifest.json").write_text(json.dumps({"step": 5, "format": "local", "lora": False}))
    ckpt = Checkpoint.objects.create(job=job, step=5, path=str(ckpt_dir))
    gone = Checkpoint.objects.create(job=job, step=9, path=str(tmp_path / "global_step_9"))
    with pytest.raises(ApplicationError, match="still on disk"):
        zs.dry_run_request(version=prompts_version, user=engineer, checkpoint_id=gone.pk,
                           reward_version_id=tie_reward.pk)
    with pytest.raises(ApplicationError, match="either"):
        zs.dry_run_request(version=prompts_version, user=engineer, checkpoint_id=ckpt.pk, model_id=tiny_model.pk,
                           reward_version_id=tie_reward.pk)
    run = zs.dry_run_request(version=prompts_version, user=engineer, checkpoint_id=ckpt.pk,
                             reward_version_id=tie_reward.pk,
                             params={"group_size": 2, "max_response_length": 2, "max_prompts": 6})
    zs.dry_run_execute(run_id=run.pk, poll_s=0.05)
    run.refresh_from_db()
    assert run.status == ZeroSignalStatus.SUCCEEDED, run.error
    assert run.result["counted"] == 6 and set(forced(prompts_version, 6)) <= set(run.result["tied_indices"])
    request = json.loads((zs.workdir(run) / "request.json").read_text())
    assert request["model"] == str(ckpt_dir) and request["base_model"] == tiny_model.path
    assert zs.run_payload(run)["source"] == f"run #{job.pk} step 5"
