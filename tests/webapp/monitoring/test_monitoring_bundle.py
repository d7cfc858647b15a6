"""The diagnostic bundle: every part a maintainer asks for is in the zip, within its bounds, and no secret the
installation knows (planted in the environment, the settings, the logs, the launch env, the samples and the reward
code) appears in any of its files; built through the CLI, the API and the worker task."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from tests.webapp.monitoring.conftest import add_points
from tests.webapp.monitoring.sample_rows import demo_rollouts
from webapp.monitoring.models import DiagnosticBundle, EvaluationStatus
from webapp.runs.models import RunEvent

pytestmark = pytest.mark.django_db

SECRET_KEY = "planted-django-secret-key-4f1a9c"
DB_PASSWORD = "planted-db-pass-77x"
REDIS_PASSWORD = "planted-redis-pass-55y"
HF_TOKEN = "hf_plantedHubToken123456"
SLACK_URL = "http://127.0.0.1:9/services/T000/B000/plantedSlackPath99"


@pytest.fixture
def secret_run(launched_job, project, admin_user, engineer, settings, monkeypatch):
    """A launched run whose files, settings and environment are full of secrets."""
    from rest_framework.authtoken.models import Token

    from webapp.notifications.services import hook_create

    settings.SECRET_KEY = SECRET_KEY
    settings.REDIS_URL = f"redis://:{REDIS_PASSWORD}@127.0.0.1:6379/3"
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
    monkeypatch.setitem(settings.DATABASES["default"], "PASSWORD", DB_PASSWORD)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("DATABASE_URL_FOR_TESTS_ONLY", f"postgres://wb:{DB_PASSWORD}@db/wb")
    api_token = Token.objects.create(user=engineer).key
    hook = hook_create(project=project, user=admin_user, name="ops", kind="json", url="http://127.0.0.1:9/h",
                       events=["job.stalled"])
    hook_create(project=project, user=admin_user, name="chat", kind="slack", url=SLACK_URL, events=["job.failed"])
    secrets = [SECRET_KEY, DB_PASSWORD, REDIS_PASSWORD, HF_TOKEN, api_token, hook.secret, "plantedSlackPath99"]

    job = launched_job(max_steps=40)
    run = Path(job.run_dir)
    adir = run / "attempts" / "1"
    adir.mkdir(parents=True, exist_ok=True)
    leak = " ".join(secrets)
    (adir / "log.txt").write_text("step 1 fine\n" + "".join(f"noise line {i}\n" for i in range(2000)) +
                                  f"env dump: SECRET_KEY={SECRET_KEY} HF_TOKEN={HF_TOKEN}\n"
                                  f"connecting to postgres://wb:{DB_PASSWORD}@db:5432/wb\n"
                                  f"curl -H 'Authorization: Token {api_token}' {SLACK_URL}\nall of them: {leak}\n"
                                  "the last line a maintainer needs\n")
    launch = json.loads((adir / "launch.json").read_text())
    launch["env"] = {**launch.get("env", {}), "HF_TOKEN": HF_TOKEN, "WANDB_API_KEY": "planted-wandb-key-9",
                     "NOTE": f"hook {hook.secret}"}
    (adir / "launch.json").write_text(json.dumps(launch))
    (adir / "stacks").mkdir()
    (adir / "stacks" / "1700000000.txt").write_text(f"Thread 1 (idle)\n    rollout (verl.py:10) {api_token}\n")
    folder = run / "samples" / "rollout"
    folder.mkdir(parents=True)
    for step in range(1, 9):
        rows = demo_rollouts(step)
        rows[0]["output"] = f"the model says {SECRET_KEY}"
        (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    version = job.reward_versions.first()
    type(version).objects.filter(pk=version.pk).update(source=version.source + f"\n# token {api_token}\n")
    add_points(job, "critic/score/mean", [0.1, 0.2, None, 0.4])
    add_points(job, "actor/kl_loss", [0.01, 0.02, 0.5, 0.03])
    RunEvent.objects.create(job=job, kind="guard_rule", step=3, message="kl above 0.1 for 1 step: warn",
                            data={"rule": "kl"})
    return job, secrets + ["planted-wandb-key-9"]


def _files(data: bytes) -> dict[str, str]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {name: zf.read(name).decode("utf-8", errors="replace") for name in zf.namelist()}


def _no_secret_anywhere(files: dict[str, str], secrets: list[str]) -> None:
    for name, text in files.items():
        for secret in secrets:
            assert secret not in text, f"{secret!r} leaked into {name}"


def test_the_cli_bundle_holds_every_part_and_no_secret(secret_run, tmp_path, monkeypatch):
    from django.core.management import call_command

    from webapp.monitoring.services import bundle

    job, secrets = secret_run
    monkeypatch.setattr(bundle, "LOG_TAIL_MB", 0.02)  # 20 kB: the 2,000 noise lines do not all fit
    out = io.StringIO()
    call_command("diagnostic_bundle", job.pk, "--steps", "3", "--out", str(tmp_path / "b.zip"), stdout=out)
    files = _files((tmp_path / "b.zip").read_bytes())
    _no_secret_anywhere(files, secrets)
    names = set(files)
    assert {"job.json", "config/settings.json", "versions.json", "attempts/1/log.txt", "attempts/1/launch.json",
            "attempts/1/stacks/1700000000.txt", "metrics.csv", "history/events.json", "history/guard.json",
            "data.json", "MANIFEST.json"} <= names
    assert sorted(n for n in names if n.startswith("samples/")) == [f"samples/rollout/{s}.jsonl" for s in (6, 7, 8)]
    assert any(n.startswith("rewards/exact_match_v") and n.endswith(".py") for n in names)
    assert any(n.startswith("rewards/pinned/") for n in names)
    # the parts say what they should
    import torch

    versions = json.loads(files["versions.json"])
    assert versions["packages"]["torch"] in torch.__version__ and versions["app"]["describe"]
    assert json.loads(files["job.json"])["kind"] == "grpo"
    assert json.loads(files["config/settings.json"])["config"]["hp"]["max_steps"] == 40
    log = files["attempts/1/log.txt"]
    assert log.endswith("the last line a maintainer needs\n") and "noise line 0\n" not in log  # the tail is kept
    assert "[redacted]" in log and "connecting to postgres://wb:[redacted]@db:5432/wb" in log
    assert json.loads(files["attempts/1/launch.json"])["env"]["WANDB_API_KEY"] == "[redacted]"
    lines = files["metrics.csv"].splitlines()
    assert lines[0] == "step,actor/kl_loss,critic/score/mean" and lines[3] == "3,0.5," and len(lines) == 5
    guard = json.loads(files["history/guard.json"])
    assert [t["step"] for t in guard["trips"]] == [3] and guard["rules"] == job.config.get("guard_rules")
    data = json.loads(files["data.json"])
    assert data["dataset_version"]["content_hash"] == job.dataset_version.content_hash
    assert data["pinned_files"]["train"]["rows"] > 0 and len(data["pinned_files"]["train"]["sha256"]) == 64
    manifest = json.loads(files["MANIFEST.json"])
    assert any(f["name"] == "attempts/1/log.txt" and "last 0.02 MB" in f["why"] for f in manifest["left_out"])
    assert "metrics.csv" in out.getvalue() and "b.zip" in out.getvalue()


def test_the_api_queues_a_bundle_the_worker_builds_and_the_zip_downloads(secret_run, api_for, engineer, viewer,
                                                                         django_capture_on_commit_callbacks,
                                                                         monkeypatch):
    from webapp.monitoring.services import bundle

    job, secrets = secret_run
    queued = []
    monkeypatch.setattr(bundle, "enqueue", lambda task, pk, queue: queued.append((task, pk, queue)))
    api = api_for(engineer)
    url = f"/api/projects/{job.project.slug}/monitor/jobs/{job.pk}/bundles/"
    assert api_for(viewer).post(url, {"sample_steps": 2}, format="json").status_code == 403
    assert api.post(url, {"sample_steps": 500}, format="json").status_code == 400
    with django_capture_on_commit_callbacks(execute=True):
        r = api.post(url, {"sample_steps": 2}, format="json")
        again = api.post(url, {"sample_steps": 2}, format="json")  # a second click while it is queued
    assert r.status_code == 202 and r.json()["status"] == "queued" and r.json()["download"] is None
    assert again.json()["id"] == r.json()["id"] and len(queued) == 1
    from jobs.tasks import build_bundle

    build_bundle.apply(args=[queued[0][1]])
    build_bundle.apply(args=[queued[0][1]])  # a redelivery does nothing
    got = api.get(f"{url}{r.json()['id']}/").json()
    assert got["status"] == "succeeded" and got["download"] and got["bytes"] > 0
    assert {f["name"] for f in got["files"]} >= {"metrics.csv", "samples/rollout/8.jsonl", "samples/rollout/7.jsonl"}
    zipped = api.get(f"{url}{r.json()['id']}/download/")
    assert zipped.status_code == 200 and zipped["Content-Type"] == "application/zip"
    _no_secret_anywhere(_files(b"".join(zipped.streaming_content)), secrets)
    assert DiagnosticBundle.objects.get().status == EvaluationStatus.SUCCEEDED


def test_the_bundles_page_asks_follows_and_guards(secret_run, as_user, engineer, viewer, monkeypatch,
                                                 django_capture_on_commit_callbacks):
    from webapp.monitoring.services import bundle

    monkeypatch.setattr(bundle, "enqueue", lambda *a, **kw: None)
    job, _secrets = secret_run
    base = f"/p/{job.project.slug}/monitor/jobs/{job.pk}/bundles/"
    assert as_user(viewer).get(base).status_code == 403
    c = as_user(engineer)
    assert "No bundle yet" in c.get(base).content.decode()
    bad = c.post(f"{base}new/", {"sample_steps": "lots"}, follow=True).content.decode()
    assert "must be a whole number" in bad and not DiagnosticBundle.objects.exists()
    page = c.post(f"{base}new/", {"sample_steps": "2"}, follow=True).content.decode()
    assert "building on a worker" in page and 'data-building="1"' in page
    b = DiagnosticBundle.objects.get()
    assert c.get(f"{base}{b.pk}/download/", follow=True).content.decode().count("is not ready") == 1
    bundle.bundle_run(bundle_id=b.pk)
    fragment = c.get(base, {"fragment": 1}).content.decode()
    assert "Download the zip" in fragment and 'data-building=""' in fragment and "<html" not in fragment
    assert c.get(f"{base}{b.pk}/download/")["Content-Type"] == "application/zip"
