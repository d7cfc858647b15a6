"""Re-scoring a run's stored rollout samples with another reward version: services, API, CLI, a real worker."""
from __future__ import annotations

import time

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import start_celery_workers, stop_celery_workers
from tests.sandbox_gate import GATE_SOURCE, new_gate, open_gate
from tests.webapp.demo_run import LENIENT_SOURCE, WEIGHTS, train_demo_job
from training import ingest, rollouts
from webapp.core.services import ApplicationError
from webapp.rewards.models import RewardFunction
from webapp.rewards.services import reward_version_save
from webapp.runs.models import Rescore, RescoreSample
from webapp.runs.services import rescore as service


@pytest.fixture
def trained(project, engineer, tiny_model_dir, no_enqueue, fake_supervisor):
    return train_demo_job(project, engineer, tiny_model_dir)


def _lenient(project, engineer, gate: str | None = None):
    """The lenient version; with `gate`, each step's sandbox holds its first sample at that gate (each step
    scores in a sandbox of its own), so the test sees where the re-score stands however fast the machine is."""
    fn = RewardFunction.objects.get(project=project, name="exact-match")
    source = LENIENT_SOURCE
    if gate:
        hold = f"    global _held\n    if not _held:\n        _held = True\n        _wait_at_gate({gate!r})\n    try:"
        source = GATE_SOURCE + "\n_held = False\n" + source.replace("    try:", hold)
    return reward_version_save(function=fn, user=engineer, source=source, message="one off counts").version


def _lenient_score(row) -> float:
    try:
        return 1.0 if abs(int(row["output"].strip()) - int(row["gts"])) <= 1 else 0.0
    except ValueError:
        return 0.0


def _expected(job) -> dict[tuple[int, int], tuple[float, float]]:
    """(step, row) -> (old, new): the job's mix with the exact match replaced by the lenient version."""
    out = {}
    for step in rollouts.steps(job.run_dir):
        for i, row in enumerate(ingest.read_samples(job.run_dir, "rollout", step)):
            shape = row["components"]["shape_v1"]
            new = WEIGHTS["exact_match_v1"] * _lenient_score(row) + (WEIGHTS["shape_v1"] * shape if shape is not None
                                                                      else 0.0)
            out[(step, i)] = (row["score"], new)
    return out


def _check_results(rescore: Rescore, expected) -> None:
    got = {(s.step, s.row): (s.old_score, s.new_score, s.changed) for s in rescore.samples.all()}
    assert set(got) == set(expected)
    for key, (old, new) in expected.items():
        assert got[key][0] == pytest.approx(old) and got[key][1] == pytest.approx(new), key
        assert got[key][2] == (abs(new - old) > 1e-9), key
    changed = sum(abs(n - o) > 1e-9 for o, n in expected.values())
    assert rescore.changed_count == changed and rescore.done_count == len(expected)
    assert 0 < changed < len(expected)  # the lenient version changes some samples, not all


@pytest.mark.django_db
def test_the_cli_rescores_in_place_of_the_same_functions_component(trained, project, engineer):
    version = _lenient(project, engineer)
    call_command("rescore_run", str(trained.pk), "--reward", "exact-match", "--here", "--user", engineer.username)
    rescore = Rescore.objects.get()
    assert rescore.reward_version == version and rescore.component == "exact_match_v1"
    assert rescore.state == "succeeded" and rescore.steps == [1, 2, 3]
    _check_results(rescore, _expected(trained))
    # alone: the lenient score itself against the stored total
    call_command("rescore_run", str(trained.pk), "--reward", "exact-match", "--alone", "--steps", "2", "--here")
    alone = Rescore.objects.latest("pk")
    rows = ingest.read_samples(trained.run_dir, "rollout", 2)
    assert [s.new_score for s in alone.samples.order_by("row")] == [_lenient_score(r) for r in rows]
    with pytest.raises(CommandError, match="No stored samples for step 9"):
        call_command("rescore_run", str(trained.pk), "--reward", "exact-match", "--steps", "2,9")
    with pytest.raises(CommandError, match="no reward 'nope'"):
        call_command("rescore_run", str(trained.pk), "--reward", "nope")


@pytest.mark.django_db
def test_bad_requests_are_refused_with_the_field_at_fault(trained, project, engineer, api_for):
    from webapp.core.models import Project
    from webapp.rewards.services import reward_function_create

    other = Project.objects.create(slug="other", name="Other")
    foreign = reward_function_create(project=other, user=None, name="x", source=LENIENT_SOURCE).latest_version
    with pytest.raises(ApplicationError) as exc:
        service.rescore_create(job=trained, user=engineer, version=foreign)
    assert exc.value.field == "version"
    with pytest.raises(ApplicationError, match="no reward component 'nope'"):
        service.rescore_create(job=trained, user=engineer, version=_lenient(project, engineer), component="nope")
    url = f"/api/projects/{project.slug}/jobs/{trained.pk}/rescores/"
    resp = api_for(engineer).post(url, {"version": foreign.pk}, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "version"
    resp = api_for(engineer).post(url, {"version": foreign.pk, "steps": "1-x"}, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "steps"
    assert not Rescore.objects.exists()


@pytest.fixture
def trained_committed(transactional_db, project, engineer, tiny_model_dir, no_enqueue, fake_supervisor):
    """The trained job, committed for a worker to see (made before the worker starts: its launch runs the
    reward probes here)."""
    return train_demo_job(project, engineer, tiny_model_dir)


@pytest.fixture
def patient_worker(trained_committed, tmp_path, settings):
    """Real workers whose sandboxes let a held sample wait as long as the test needs to look."""
    procs = start_celery_workers(settings, tmp_path / "worker.log", extra_env={"REWARD_TIME_LIMIT_S": "600"})
    yield procs[0]
    stop_celery_workers(procs)


def test_a_real_worker_rescores_with_progress_and_the_api_sorts_and_filters(
        trained_committed, patient_worker, project, engineer, viewer, api_for):
    job = trained_committed
    gate = new_gate()
    version = _lenient(project, engineer, gate=gate)
    url = f"/api/projects/{project.slug}/jobs/{job.pk}/rescores/"
    assert api_for(viewer).post(url, {"version": version.pk}, format="json").status_code == 403
    resp = api_for(engineer).post(url, {"version": version.pk}, format="json")
    assert resp.status_code == 202, resp.content
    body = resp.json()
    # a worker that is quick to take it may have started it before the response was written
    assert body["state"] in ("queued", "running") and body["sample_count"] == 3 * 128
    assert body["component"] == "exact_match_v1"
    detail, deadline, seen = f"{url}{body['id']}/", time.monotonic() + 600, []  # the bound only guards a hang
    while time.monotonic() < deadline:
        got = api_for(viewer).get(detail).json()
        seen.append((got["state"], got["done_count"]))
        if got["state"] in ("succeeded", "failed"):
            break
        if got["state"] in ("queued", "running"):  # queued: the version's probes may be held at the gate
            open_gate(gate)  # a step held there goes on once a poll has seen the count before it
        time.sleep(0.1)
    assert got["state"] == "succeeded", (got, patient_worker.log_path.read_text()[-3000:])
    assert any(state == "running" and 0 < done < 384 for state, done in seen), seen  # progress while it ran
    rescore = Rescore.objects.get(pk=body["id"])
    expected = _expected(job)
    _check_results(rescore, expected)
    assert got["changed_share"] == pytest.approx(rescore.changed_count / len(expected))
    assert [s["step"] for s in got["summary"]["per_step"]] == [1, 2, 3]
    # the biggest rises first, only changed samples
    page = api_for(viewer).get(detail, {"show": "changed", "sort": "-delta"}).json()
    deltas = [s["delta"] for s in page["samples"]]
    assert page["count"] == rescore.changed_count and deltas == sorted(deltas, reverse=True)
    assert all(s["changed"] for s in page["samples"])
    assert api_for(viewer).get(detail, {"sort": "nope"}).status_code == 400
    assert RescoreSample.objects.filter(rescore=rescore, step=2).count() == 128


@pytest.mark.django_db
def test_the_pages_refuse_bad_input_in_words_and_keep_projects_apart(trained, project, engineer, viewer, as_user,
                                                                      django_user_model):
    from webapp.core.models import Membership, Project, Role

    version = _lenient(project, engineer)
    base = f"/p/{project.slug}/jobs/{trained.pk}/rescores/"
    page = as_user(viewer).get(base)
    assert page.status_code == 200 and b"Re-score stored samples" in page.content
    assert b"rescore-form" not in page.content  # a viewer reads, does not ask
    assert as_user(viewer).post(base, {"version": version.pk, "component": "__auto__"}).status_code == 403
    bad = as_user(engineer).post(base, {"version": version.pk, "component": "__auto__", "steps": "2-x"})
    assert bad.status_code == 200 and b"Steps are step numbers and ranges" in bad.content
    missing = as_user(engineer).post(base, {"version": version.pk, "component": "__auto__", "steps": "99"})
    assert missing.status_code == 200 and b"No stored samples for step 99" in missing.content
    assert not Rescore.objects.exists()
    done = as_user(engineer).post(base, {"version": version.pk, "component": "", "steps": "1"})
    rescore = Rescore.objects.get()
    assert done.status_code == 302 and done["Location"].endswith(f"/rescores/{rescore.pk}/")
    assert rescore.component == "" and rescore.state == "queued"
    page = as_user(viewer).get(done["Location"], {"sort": "nope", "show": "??", "step": "x"})
    assert page.status_code == 200 and b'id="rescore-state">queued<' in page.content
    # someone of another project sees neither the run nor the re-score
    other = Project.objects.create(slug="other", name="Other")
    stranger = django_user_model.objects.create_user(username="sam", password="pw-for-tests-1")
    Membership.objects.create(project=other, user=stranger, role=Role.ADMIN)
    assert as_user(stranger).get(done["Location"]).status_code in (403, 404)
    assert as_user(stranger).get(f"/p/other/jobs/{trained.pk}/rescores/{rescore.pk}/").status_code == 404


def test_the_new_total_is_the_jobs_mix_with_one_component_replaced():
    reward = {"shaping": "binary", "components": [{"name": "exact", "weight": 1.0}, {"name": "fmt", "weight": 0.5}]}
    row = {"components": {"exact": 0.0, "fmt": 1.0}}
    assert service.new_total(row, 1.0, None, reward, "exact") == (1.0, None)  # 1 + 0.5 -> binary 1
    assert service.new_total(row, 0.2, None, reward, "exact") == (1.0, None)  # 0.2 + 0.5 = 0.7 >= 0.5
    assert service.new_total(row, 5.0, "ValueError: x", reward, "exact") == (1.0, "ValueError: x")  # failed -> 0
    assert service.new_total({"components": {"fmt": 0.0}}, 0.4, None, reward, "exact") == (0.0, None)
    assert service.new_total({"components": {"exact": 1.0}}, 1.0, None, reward, "exact")[0] is None  # no fmt stored
    assert service.new_total(row, 0.3, None, reward, "") == (0.3, None)  # alone: its own score
    assert service.new_total(row, 0.3, "boom", reward, "") == (None, "boom")
    assert service.parse_steps(" 3, 5-7 ,3") == [3, 5, 6, 7] and service.parse_steps("all") is None
