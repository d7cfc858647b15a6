"""Job and model pages: access per role, the launch form (errors on fields, review step, launch), clone, log."""
from __future__ import annotations

import pytest

from webapp.registry.models import ModelEntry
from webapp.runs.models import Job, JobState
from webapp.runs.services import job_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(project, engineer, prompts_version, tiny_model, reward_spec, no_enqueue):
    return job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                      hp_overrides={"max_steps": 10}, dataset_version=prompts_version, reward_spec=reward_spec,
                      base_model=tiny_model, include_unreviewed=True)


def form_data(version, model, reward_fn, **extra):
    from training.hparams import base_config
    from webapp.runs.forms import settings_initial

    data = {k: ("" if v is None else v) for k, v in settings_initial(base_config("grpo", "demo-cpu")).items()}
    data = {k: v for k, v in data.items() if v is not False}  # unchecked checkboxes are absent
    data = {k: ("on" if v is True else v) for k, v in data.items()}
    data.update({"kind": "grpo", "backend": "local", "preset": "demo-cpu", "dataset_version": version.pk,
                 "base_model": model.pk, "include_unreviewed": "on", "max_steps": 10,
                 f"reward-fn_{reward_fn.pk}_version": reward_fn.latest_version.pk,
                 f"reward-fn_{reward_fn.pk}_weight": 1.0, "reward-shaping": "raw"})
    data.update(extra)
    return data


READ = ["list", "detail", "log", "models"]
WRITE_GET = ["new", "clone"]


def url(project, name, job):
    base = f"/p/{project.slug}/jobs/"
    return {"list": base, "new": base + "new/", "preview": base + "preview/", "models": base + "models/",
            "detail": f"{base}{job.pk}/", "log": f"{base}{job.pk}/log/", "clone": f"{base}{job.pk}/clone/",
            "cancel": f"{base}{job.pk}/cancel/", "resume": f"{base}{job.pk}/resume/",
            "register": f"{base}{job.pk}/register-model/"}[name]


@pytest.mark.parametrize("name", READ)
def test_read_pages_per_role(name, project, job, admin_user, engineer, reviewer, viewer, outsider, as_user):
    for user, code in ((admin_user, 200), (engineer, 200), (reviewer, 200), (viewer, 200), (outsider, 404)):
        assert as_user(user).get(url(project, name, job)).status_code == code, (user.username, name)


@pytest.mark.parametrize("name", WRITE_GET)
def test_launch_pages_need_an_engineer(name, project, job, engineer, reviewer, viewer, outsider, as_user):
    for user, code in ((engineer, 200), (reviewer, 403), (viewer, 403), (outsider, 404)):
        assert as_user(user).get(url(project, name, job)).status_code == code, (user.username, name)


@pytest.mark.parametrize("name", ["new", "preview", "cancel", "resume", "models", "register"])
def test_writes_refused_below_engineer(name, project, job, reviewer, viewer, outsider, as_user):
    for user, code in ((reviewer, 403), (viewer, 403), (outsider, 404)):
        assert as_user(user).post(url(project, name, job), {"name": "x"}).status_code == code, (user.username, name)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and not job.cancel_requested
    assert Job.objects.count() == 1 and not ModelEntry.objects.filter(name="x").exists()


def test_form_shows_refusals_next_to_their_fields(project, engineer, as_user, prompts_version, tiny_model, reward_fn,
                                                  no_enqueue):
    data = form_data(prompts_version, tiny_model, reward_fn, group_size=1, mini_batch_size=5, lr="abc")
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 400
    form = resp.context["form"]
    assert "at least 2" in form.errors["group_size"][0]
    assert "lr" in form.errors
    assert Job.objects.count() == 0
    html = resp.content.decode()
    assert 'id="id_group_size-error"' in html


def test_missing_reward_is_shown_on_the_reward_widget(project, engineer, as_user, prompts_version, tiny_model,
                                                      reward_fn, no_enqueue):
    data = form_data(prompts_version, tiny_model, reward_fn, **{f"reward-fn_{reward_fn.pk}_weight": ""})
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 400
    assert "GRPO needs a reward" in " ".join(resp.context["reward_form"].non_field_errors())


def test_a_launch_is_planned_once_and_its_reward_spec_validated_once(project, engineer, as_user, prompts_version,
                                                                      tiny_model, reward_fn, no_enqueue, monkeypatch):
    from training import hparams as config
    from webapp.runs.services import plan as spec

    calls = {"plans": 0, "reward_checks": 0}

    def counted(name, module, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(config, "resolve_config", counted("plans", config, config.resolve_config))
    monkeypatch.setattr(spec, "reward_spec_validate", counted("reward_checks", spec, spec.reward_spec_validate))
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/",
                                  form_data(prompts_version, tiny_model, reward_fn, action="launch"))
    assert resp.status_code == 302 and Job.objects.count() == 1
    assert calls == {"plans": 1, "reward_checks": 1}


def test_settings_hidden_for_the_backend_are_not_sent_to_the_plan(project, engineer, as_user, prompts_version,
                                                                  tiny_model, reward_fn, no_enqueue):
    # A distillation-only value left in the (hidden) field of a GRPO job does not reach its plan.
    data = form_data(prompts_version, tiny_model, reward_fn, backend="verl", device="cpu", verl_strategy="fsdp2",
                     verl_rollout_engine="hf", distill_alpha=0.9, action="review")
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 200, resp.context["form"].errors
    assert resp.context["plan"].config["hp"]["distill_alpha"] == 0.5


def test_review_step_shows_yaml_and_command_then_launch(project, engineer, as_user, prompts_version, tiny_model,
                                                        reward_fn, no_enqueue):
    client = as_user(engineer)
    data = form_data(prompts_version, tiny_model, reward_fn, kl_coef=0.2, action="review")
    resp = client.post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "max_steps: 10" in html and "training.local.train" in html
    assert "outside the usual" in html  # the KL warning, which does not block
    assert Job.objects.count() == 0
    hidden = dict(resp.context["hidden"])
    hidden["action"] = "launch"
    resp = client.post(f"/p/{project.slug}/jobs/new/", hidden)
    job = Job.objects.get()
    assert resp.status_code == 302 and resp["Location"].endswith(f"/jobs/{job.pk}/")
    assert job.config["hp"]["kl_coef"] == 0.2 and job.created_by == engineer
    assert no_enqueue == [(job.pk, "cpu", None)] or no_enqueue == []  # enqueued on commit


def test_verl_review_shows_the_exact_command(project, engineer, as_user, prompts_version, tiny_model, reward_fn,
                                             no_enqueue):
    data = form_data(prompts_version, tiny_model, reward_fn, backend="verl", device="cuda", action="review",
                     verl_n_gpus_per_node=1, verl_rollout_engine="vllm")
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 200, resp.context["form"].errors
    command = resp.context["command"]
    assert "python -m verl.trainer.main_ppo" in command
    assert "algorithm.adv_estimator=grpo" in command.splitlines()
    assert "actor_rollout_ref.rollout.n=8" in command.splitlines()
    # the table "setting -> VERL key -> resolved value", composed with VERL's own config
    html = resp.content.decode()
    assert '<table id="resolved">' in html
    assert "<td><code>actor_rollout_ref.rollout.n</code></td><td><code>8</code>" in html
    rows = {r["key"]: r for r in resp.context["resolved"]}
    assert rows["trainer.use_v1"]["resolved"] == "true" and rows["reward.reward_manager.name"]["resolved"] == "naive"
    assert all(r["ok"] for r in rows.values())


def test_preview_endpoint(project, engineer, as_user, prompts_version, tiny_model, reward_fn, no_enqueue):
    client = as_user(engineer)
    body = client.post(f"/p/{project.slug}/jobs/preview/", form_data(prompts_version, tiny_model, reward_fn)).json()
    assert body["ok"] and "kind: grpo" in body["yaml"] and body["counts"]["train"] == 36
    body = client.post(f"/p/{project.slug}/jobs/preview/",
                       form_data(prompts_version, tiny_model, reward_fn, group_size=1, kl_coef=0.001)).json()
    assert not body["ok"] and "group_size" in body["errors"] and "kl_coef" in body["warnings"]


def test_clone_prefills_the_form(project, engineer, as_user, job):
    resp = as_user(engineer).get(f"/p/{project.slug}/jobs/{job.pk}/clone/")
    form = resp.context["form"]
    assert form.initial["max_steps"] == 10 and form.initial["group_size"] == 8
    assert form.initial["dataset_version"] == job.dataset_version_id
    reward_form = resp.context["reward_form"]
    fn_pk = job.reward_versions.get().function_id
    assert reward_form.initial[f"fn_{fn_pk}_weight"] == 1.0


def test_detail_shows_config_data_and_monitoring_slot(project, viewer, as_user, job):
    resp = as_user(viewer).get(f"/p/{project.slug}/jobs/{job.pk}/")
    html = resp.content.decode()
    assert "max_steps: 10" in html and "36 train" in html and "exact-match v1" in html
    assert "Cancel" not in html  # viewers read only
    body = as_user(viewer).get(f"/p/{project.slug}/jobs/{job.pk}/log/").json()
    assert body["state"] == "queued" and body["lines"] == []


def test_cancel_from_the_page(project, engineer, as_user, job):
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/{job.pk}/cancel/")
    assert resp.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_register_a_model_folder_and_a_hub_id(project, engineer, as_user, tiny_model_dir, tiny_rm_dir, settings):
    settings.MODEL_ROOTS = [str(tiny_model_dir.parent), str(tiny_rm_dir.parent)]
    client = as_user(engineer)
    resp = client.post(f"/p/{project.slug}/jobs/models/", {"name": "local", "path": str(tiny_model_dir)})
    assert resp.status_code == 302
    m = ModelEntry.objects.get(name="local")
    assert m.kind == "causal_lm" and m.num_parameters > 1000
    client.post(f"/p/{project.slug}/jobs/models/", {"name": "rm", "path": str(tiny_rm_dir)})
    assert ModelEntry.objects.get(name="rm").kind == "reward_model"
    client.post(f"/p/{project.slug}/jobs/models/", {"name": "qwen", "hub_id": "Qwen/Qwen2.5-0.5B-Instruct"})
    resp = client.get(f"/p/{project.slug}/jobs/models/")
    assert "GPU workers with hub access only" in resp.content.decode()
    root = settings.MODELS_ROOT
    (root / "empty").mkdir()
    for path, words in ((str(root / "nope"), "does not exist"), (str(root / "empty"), "no config.json"),
                        ("relative/dir", "absolute path")):
        resp = client.post(f"/p/{project.slug}/jobs/models/", {"name": "bad", "path": path})
        assert resp.status_code == 400 and words in resp.context["form"].errors["path"][0]
    (root / "broken").mkdir()
    (root / "broken" / "config.json").write_text("{not json")
    resp = client.post(f"/p/{project.slug}/jobs/models/", {"name": "bad", "path": str(root / "broken")})
    assert resp.status_code == 400 and "cannot read" in resp.context["form"].errors["path"][0]


def test_monitoring_panel_is_included_when_that_app_provides_it(project, viewer, as_user, job, monkeypatch):
    from django.template import TemplateDoesNotExist, engines

    import webapp.runs.templatetags.runs_tags as tags

    html = as_user(viewer).get(f"/p/{project.slug}/jobs/{job.pk}/").content.decode()
    assert "MONITORING PANEL" not in html
    panel = engines["django"].from_string("MONITORING PANEL for #{{ job.pk }}")

    def fake_get_template(name):
        if name == "monitoring/_job_panel.html":
            return panel
        raise TemplateDoesNotExist(name)

    monkeypatch.setattr(tags, "get_template", fake_get_template)
    html = as_user(viewer).get(f"/p/{project.slug}/jobs/{job.pk}/").content.decode()
    assert f"MONITORING PANEL for #{job.pk}" in html


def test_register_a_checkpoint_as_a_model(project, engineer, as_user, job, tiny_rm_dir, fake_supervisor, settings):
    import json
    import shutil
    from pathlib import Path

    from webapp.runs.models import Checkpoint
    from webapp.runs.services import job_launch

    job_launch(job.pk)
    job.refresh_from_db()
    ckpt = Path(job.run_dir) / "checkpoints" / "global_step_5"
    shutil.copytree(tiny_rm_dir, ckpt / "model")
    (ckpt / "manifest.json").write_text(json.dumps({"step": 5, "format": "local", "lora": False, "metrics": {}}))
    Checkpoint.objects.create(job=job, step=5, path=str(ckpt))
    client = as_user(engineer)
    resp = client.post(f"/p/{project.slug}/jobs/{job.pk}/register-model/", {"step": 5, "name": "rm-v1"})
    assert resp.status_code == 302
    entry = ModelEntry.objects.get(name="rm-v1")
    assert entry.kind == "reward_model" and entry.source_job == job
    assert Path(entry.path).is_relative_to(settings.MODELS_ROOT) and (Path(entry.path) / "config.json").exists()
    shutil.rmtree(ckpt)  # retention may delete the checkpoint; the registered copy stays usable
    assert (Path(entry.path) / "config.json").exists()
    resp = client.post(f"/p/{project.slug}/jobs/{job.pk}/register-model/", {"step": 9}, follow=True)
    assert "no checkpoint at step 9" in resp.content.decode()


def test_the_forms_health_rules_replace_the_presets_and_bad_ones_are_refused(project, engineer, as_user,
                                                                              prompts_version, tiny_model, reward_fn,
                                                                              no_enqueue):
    data = form_data(prompts_version, tiny_model, reward_fn, preset="demo-cpu-guarded", guard_rules_form="1",
                     rule_kl="on", rule_kl_threshold="0.4", rule_kl_action="restore", rule_grad_norm_spike="on",
                     rule_grad_norm_spike_threshold="", rule_grad_norm_spike_action="", action="review")
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 200, resp.context["form"].errors
    rules = resp.context["plan"].config["guard_rules"]
    assert rules == [{"rule": "kl", "threshold": 0.4, "patience": 3, "action": "restore", "lr_factor": 0.5,
                      "max_restores": 2}, {"rule": "grad_norm_spike"}]  # blanks keep the preset's values
    data.update(rule_kl_action="sideways", action="launch")
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 400 and "rule_kl_action" in resp.context["form"].errors
    assert Job.objects.count() == 0


def test_the_forms_human_evaluation_schedule_reaches_the_config(project, engineer, as_user, prompts_version,
                                                               tiny_model, reward_fn, no_enqueue):
    data = form_data(prompts_version, tiny_model, reward_fn, human_eval_form="1", he_every="3", he_against="base",
                     he_items="12", he_dataset_version=prompts_version.pk, he_split="val", he_reward_rise="0.25",
                     action="launch")
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 302, resp.context["form"].errors
    assert Job.objects.get().config["human_eval"] == {"every": 3, "against": "base", "items": 12, "split": "val",
                                                      "reward_rise": 0.25, "dataset_version": prompts_version.pk}
    data.update(he_every="", he_against="previous")  # blank: off
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 302 and not Job.objects.latest("pk").config.get("human_eval")
    data.update(he_every="2", he_items="900")
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/new/", data)
    assert resp.status_code == 400 and "he_items" in resp.context["form"].errors


def test_check_human_eval_schedule():
    from training.hparams import resolve_config
    from training.jobconfig import check_human_eval

    assert check_human_eval({"every": 2, "against": "previous", "items": 5, "reward_rise": 0}) is None
    assert "every" in check_human_eval({"every": 0})
    assert "against" in check_human_eval({"every": 1, "against": "sideways"})
    assert "unknown keys" in check_human_eval({"every": 1, "often": True})
    assert "reward_rise" in check_human_eval({"every": 1, "reward_rise": -1})
    _config, errors, _w = resolve_config("grpo", "demo-cpu", {"human_eval": {"every": "x"}})
    assert "Human evaluation schedule" in errors["human_eval"]
