"""Pages and forms: the job panel, samples (escaped), checkpoint actions through the UI, compare (export:
test_monitoring_export.py)."""
from __future__ import annotations

import json

import pytest

from webapp.core.models import Project
from webapp.monitoring.models import CheckpointEvaluation
from webapp.runs.models import Job, JobKind, RunEvent

pytestmark = pytest.mark.django_db


def panel(client, job) -> str:
    r = client.get(f"/p/{job.project.slug}/jobs/{job.pk}/")
    assert r.status_code == 200
    return r.content.decode()


def test_panel_has_charts_config_checkpoint_table_and_history(make_job, checkpoint, points, engineer, as_user):
    job = make_job()
    points(job, "actor/kl_loss", [0.01, 0.02])
    checkpoint(job, 5, metrics={"critic/score/mean": 0.25})
    RunEvent.objects.create(job=job, kind="checkpoint", step=5, message="saved <step 5>")
    body = panel(as_user(engineer), job)
    assert "plotly/plotly.min.js" in body and "js/monitor.js" in body
    config = json.loads(body.split('id="monitor-config" type="application/json">')[1].split("</script>")[0])
    assert config["kind"] == "grpo" and config["api"].endswith(f"/monitor/jobs/{job.pk}/")
    assert [c["id"] for c in config["charts"]][:2] == ["reward", "kl"]
    assert "saved &lt;step 5&gt;" in body  # events are escaped
    assert "0.25" in body and "1.2 KB" in body  # the metric at the checkpoint's step, its size


@pytest.mark.parametrize("kind, first", [(JobKind.DISTILL, "distill_loss"), (JobKind.REWARD_MODEL, "rm_loss")])
def test_distill_and_reward_model_jobs_get_their_own_charts(make_job, viewer, as_user, kind, first):
    body = panel(as_user(viewer), make_job(kind=kind))
    config = json.loads(body.split('id="monitor-config" type="application/json">')[1].split("</script>")[0])
    assert config["charts"][0]["id"] == first
    assert not any(c["id"] == "kl" for c in config["charts"])


def test_samples_render_escaped_side_by_side_with_the_reference(make_job, samples, viewer, as_user):
    job = make_job()
    samples(job, 10, [{"input": "<script>alert(1)</script>2+2=", "output": "<b>4</b>", "gts": "4", "score": 1.0,
                       "reference": "5", "reference_score": 0.0, "win": 1.0, "data_source": "arith"}])
    samples(job, 5, [{"input": "1+1=", "output": "2", "score": 1.0}])
    r = as_user(viewer).get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/samples/", {"step": 10, "fragment": 1})
    body = r.content.decode()
    assert "<script>alert" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "&lt;b&gt;4&lt;/b&gt;" in body and "Reference" in body and "mon-win-win" in body
    page = as_user(viewer).get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/samples/").content.decode()
    assert "&lt;b&gt;4&lt;/b&gt;" in page  # latest step by default, a full page without the fragment flag
    bad = as_user(viewer).get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/samples/", {"step": "x"})
    assert bad.status_code == 200


def test_the_checkpoints_fragment_is_the_tab_and_its_forms_return_to_the_page(make_job, checkpoint, engineer,
                                                                              viewer, outsider, as_user):
    job = make_job()
    checkpoint(job, 5)
    checkpoint(job, 10)
    base = f"/p/{job.project.slug}/monitor/jobs/{job.pk}/checkpoints/"
    body = as_user(engineer).get(base, {"back": f"/p/{job.project.slug}/jobs/{job.pk}/"}).content.decode()
    assert 'data-checkpoint-count="2"' in body and "<html" not in body  # a fragment, with its count
    assert body.count(f'value="/p/{job.project.slug}/jobs/{job.pk}/#checkpoints"') >= 2  # promote, evaluate...
    assert 'id="mon-rollback"' in body and "js-rollback" in body
    for unsafe in ("https://evil.example/", "//evil.example/x", "javascript:alert(1)"):
        other = as_user(engineer).get(base, {"back": unsafe}).content.decode()
        assert "evil" not in other and "javascript:" not in other
        assert f'value="/p/{job.project.slug}/jobs/{job.pk}/#checkpoints"' in other
    seen = as_user(viewer).get(base).content.decode()
    assert "<th scope=\"row\">10</th>" in seen and "js-rollback" not in seen  # a viewer sees, cannot act
    assert as_user(outsider).get(base).status_code == 404


def test_a_long_runs_checkpoint_table_comes_in_pages_newest_first(make_job, checkpoint, engineer, as_user,
                                                                   django_assert_max_num_queries):
    job = make_job()
    for s in range(1, 61):
        checkpoint(job, s * 10)
    client = as_user(engineer)
    page_url = f"/p/{job.project.slug}/jobs/{job.pk}/"
    base = f"/p/{job.project.slug}/monitor/jobs/{job.pk}/checkpoints/"
    with django_assert_max_num_queries(40):  # the same for 60 checkpoints as for 600: one page is read
        body = client.get(base, {"back": page_url}).content.decode()
    assert 'data-checkpoint-count="60"' in body  # the tab counts them all
    assert body.count('<th scope="row">') == 25 and '<th scope="row">600</th>' in body
    assert '<th scope="row">350</th>' not in body and "Page 1 of 3" in body
    assert f'href="{page_url}?ckpt_page=2#checkpoints"' in body and "Newer checkpoints" not in body
    last = client.get(base, {"back": page_url, "ckpt_page": 3}).content.decode()
    assert last.count('<th scope="row">') == 10 and '<th scope="row">10</th>' in last
    assert f'href="{page_url}?ckpt_page=2#checkpoints"' in last and "Older checkpoints" not in last
    whole = client.get(page_url, {"ckpt_page": 2}).content.decode()  # the run page opens on the page asked for
    assert "Checkpoints (60)" in whole and '<th scope="row">350</th>' in whole and "Page 2 of 3" in whole
    assert client.get(base, {"ckpt_page": "x"}).status_code == 200


def test_promote_through_the_page_redirects_back_with_a_message(make_job, checkpoint, engineer, as_user, project):
    job = make_job()
    c = checkpoint(job, 5)
    client = as_user(engineer)
    nxt = f"/p/{project.slug}/jobs/{job.pk}/#checkpoints"
    r = client.post(f"/p/{project.slug}/monitor/jobs/{job.pk}/checkpoints/5/promote/", {"next": nxt})
    assert r.status_code == 302 and r["Location"] == nxt
    project.refresh_from_db()
    assert project.active_checkpoint == c
    r = client.post(f"/p/{project.slug}/monitor/jobs/{job.pk}/checkpoints/9/promote/",
                    {"next": "https://evil.example/"}, follow=True)
    assert "no checkpoint at step 9" in r.content.decode()
    assert r.redirect_chain[-1][0] == f"/p/{project.slug}/jobs/{job.pk}/"  # unsafe next ignored


def test_rollback_form_creates_the_child_and_shows_field_errors(launched_job, checkpoint, engineer, as_user,
                                                                project):
    job = launched_job()
    checkpoint(job, 10)
    client = as_user(engineer)
    path = f"/p/{project.slug}/monitor/jobs/{job.pk}/checkpoints/10/rollback/"
    r = client.post(path, {"reason": "x", "lr": "-1"})
    assert r.status_code == 200 and "greater than or equal to 0" in r.content.decode()
    r = client.post(path, {"reason": "reward hacking", "kl_coef": "0.05"})
    child = Job.objects.get(parent=job)
    assert r.status_code == 302 and r["Location"] == f"/p/{project.slug}/jobs/{child.pk}/"
    assert child.config["hp"]["kl_coef"] == 0.05 and child.resume_checkpoint.step == 10


def test_rollback_api(launched_job, checkpoint, engineer, api_for, project):
    job = launched_job()
    checkpoint(job, 10)
    api = api_for(engineer)
    base = f"/api/projects/{project.slug}/monitor/jobs/{job.pk}/rollback/"
    r = api.post(base, {"step": 10, "reason": "api", "hp_overrides": {"lr": "2e-4"}}, format="json")
    assert r.status_code == 201 and r.json()["step"] == 10
    assert Job.objects.get(pk=r.json()["child"]).config["hp"]["lr"] == 2e-4
    bad = api.post(base, {"step": 11}, format="json")
    assert bad.status_code == 400 and "no checkpoint at step 11" in bad.json()["detail"]
    assert api.post(base, {"reason": "no step"}, format="json").status_code == 400
    bad = api.post(base, {"step": 10, "hp_overrides": {"clip_ratio": 1}}, format="json")
    assert bad.status_code == 400 and bad.json()["field"] == "hp_overrides"


def test_promote_and_checkpoint_list_api(make_job, checkpoint, points, engineer, api_for, project):
    job = make_job()
    checkpoint(job, 5)
    points(job, "critic/score/mean", [0.1] * 5)
    api = api_for(engineer)
    base = f"/api/projects/{project.slug}/monitor/jobs/{job.pk}/"
    assert api.post(base + "checkpoints/5/promote/").status_code == 200
    [row] = api.get(base + "checkpoints/").json()["checkpoints"]
    assert row["step"] == 5 and row["active"] and row["promoted"] and row["metrics"]["critic/score/mean"] == 0.1
    assert api.post(base + "checkpoints/5/promote/").status_code == 400  # already active


def test_evaluate_button_queues_one_evaluation(make_job, checkpoint, engineer, as_user, project, monkeypatch,
                                               django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr("webapp.monitoring.services.evaluation._enqueue", lambda pk, queue: sent.append(pk))
    job = make_job()
    checkpoint(job, 5)
    client = as_user(engineer)
    path = f"/p/{project.slug}/monitor/jobs/{job.pk}/checkpoints/5/evaluate/"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(path)
    ev = CheckpointEvaluation.objects.get()
    assert sent == [ev.pk] and ev.status == "queued"
    r = client.post(path, follow=True)
    assert "already being evaluated" in r.content.decode()
    rm = make_job("rm", kind=JobKind.REWARD_MODEL)
    checkpoint(rm, 5)
    r = client.post(f"/p/{project.slug}/monitor/jobs/{rm.pk}/checkpoints/5/evaluate/", follow=True)
    assert "no responses to judge" in r.content.decode()


def test_compare_page_lists_runs_and_their_metrics(make_job, points, viewer, as_user, project):
    a, b = make_job("alpha"), make_job("beta")
    points(a, "critic/score/mean", [0.1])
    points(b, "actor/kl_loss", [0.1])
    body = as_user(viewer).get(f"/p/{project.slug}/monitor/compare/", {"jobs": [a.pk, b.pk]}).content.decode()
    assert "alpha" in body and "beta" in body and "compare-config" in body
    assert '<option value="critic/score/mean" selected>' in body and "actor/kl_loss" in body
    empty = as_user(viewer).get(f"/p/{project.slug}/monitor/compare/").content.decode()
    assert "Tick the runs to overlay" in empty


def test_lineage_tree_on_the_panel(make_job, checkpoint, viewer, as_user):
    root = make_job("root")
    c = checkpoint(root, 10)
    child = make_job("child", parent=root, resume_checkpoint=c)
    body = panel(as_user(viewer), child)
    assert "Lineage" in body and "branched at step 10" in body and f"run #{root.pk}" in body
    assert Project.objects.get().slug in body


def test_the_old_monitor_address_leads_to_the_one_run_page(make_job, viewer, outsider, as_user):
    job = make_job()
    r = as_user(viewer).get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/")
    assert r.status_code == 301 and r["Location"] == f"/p/{job.project.slug}/jobs/{job.pk}/"
    assert as_user(outsider).get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/").status_code == 404
    body = as_user(viewer).get(r["Location"]).content.decode()
    for what in ('id="compare-link"', 'id="rescore-link"', 'id="monitor"', 'id="live-log"', 'id="settings"',
                 'id="attempts"'):
        assert what in body, what
