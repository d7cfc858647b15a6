"""Probes from the page (panel next to the code, add, override), the API and the CLI."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from training.reward_templates import get_template
from webapp.core.models import AuditLog
from webapp.rewards import probes
from webapp.rewards.services import reward_function_create

pytestmark = pytest.mark.django_db

ALWAYS_ONE = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 1.0\n"


@pytest.fixture
def always(project, engineer):
    return reward_function_create(project=project, user=engineer, name="always", source=ALWAYS_ONE)


def page(project, fn) -> str:
    return f"/p/{project.slug}/rewards/{fn.pk}/"


def test_the_page_shows_pending_then_the_failing_probes_and_the_override(as_user, project, engineer, viewer, always):
    client = as_user(engineer)
    html = client.get(page(project, always)).content.decode()
    assert "probes pending" in html and "data-probes-follow" in html
    assert "the built-in probes must score below 0.5" in html
    resp = client.post(page(project, always) + "probes/run/", {"version": "1"}, follow=True)
    html = resp.content.decode()
    assert "7 failing probes" in html and 'data-probe="builtin:empty"' in html
    assert "scored 1; built-in probes must score below 0.5" in html and "Override the failing probes" in html
    resp = client.post(page(project, always) + "probes/override/", {"version": "1", "reason": "no"}, follow=True)
    assert "Say why" in resp.content.decode() and not probes.current_run(always.latest_version).overridden
    resp = client.post(page(project, always) + "probes/override/",
                       {"version": "1", "reason": "constant baseline on purpose"}, follow=True)
    html = resp.content.decode()
    assert "Overridden" in html and "constant baseline on purpose" in html and "overridden" in html
    # a viewer reads the verdicts but has no buttons
    html = as_user(viewer).get(page(project, always)).content.decode()
    assert "constant baseline on purpose" in html and "probe-run-button" not in html
    assert as_user(viewer).post(page(project, always) + "probes/run/", {"version": "1"}).status_code == 403


def test_add_a_probe_and_the_scale_from_the_page(as_user, project, engineer, always):
    client = as_user(engineer)
    resp = client.post(page(project, always) + "probes/add/", {
        "name": "wrong", "solution_str": "#### 5", "ground_truth": "6", "hi": "0.0", "extra_info": ""}, follow=True)
    assert "Added the probe wrong" in resp.content.decode()
    probe = always.probes.get()
    assert (probe.ground_truth, probe.hi, probe.lo) == ("6", 0.0, None)
    resp = client.post(page(project, always) + "probes/add/", {"name": "open", "solution_str": "x"}, follow=True)
    assert "Give the expected range" in resp.content.decode() and always.probes.count() == 1
    client.post(page(project, always) + "probes/scale/", {"scale": "custom", "threshold": "1"})
    always.refresh_from_db()
    assert probes.low_rule(always).words == "at most 1"
    client.post(page(project, always) + f"probes/{probe.pk}/remove/")
    assert always.probes.count() == 0
    assert AuditLog.objects.filter(action__startswith="reward.probe_").count() == 3


def test_api_probes_status_run_add_and_override(api_for, project, engineer, viewer, always):
    api = api_for(engineer)
    base = f"/api/projects/{project.slug}/rewards/{always.pk}/"
    body = api.get(base + "versions/1/probes/").json()
    assert body["state"] == "pending" and body["blocks_launch"] and body["run"]["state"] == "queued"
    assert api_for(viewer).post(base + "versions/1/probes/").status_code == 403
    body = api.post(base + "versions/1/probes/").json()
    assert body["state"] == "failed" and body["run"]["failed_count"] == 7
    empty = next(r for r in body["run"]["results"] if r["key"] == "builtin:empty")
    assert empty["score"] == 1.0 and empty["input"]["solution_str"] == "" and not empty["passed"]
    resp = api.post(base + "probes/", {"name": "dict gt", "solution_str": "x", "ground_truth": {"answer": 3},
                                       "lo": 0.5}, format="json")
    assert resp.status_code == 201 and resp.json()["ground_truth"] == {"answer": 3}
    assert api.post(base + "probes/", {"name": "n", "solution_str": "x"}, format="json").json()["field"] == "lo"
    assert api.get(base + "probes/").json()[0]["name"] == "dict gt"
    assert api.post(base + "probes/scale/", {"scale": "signed"}, format="json").json()["rule"] == \
        "built-in probes must score at most 0"
    resp = api.post(base + "versions/1/probes/override/", {"reason": "pending review"}, format="json")
    assert resp.status_code == 400 and "not run yet" in resp.json()["detail"]  # the new suite is pending
    assert api.post(base + "versions/1/probes/").json()["state"] == "failed"
    assert api.post(base + "versions/1/probes/override/", {"reason": "x"}, format="json").status_code == 400
    body = api.post(base + "versions/1/probes/override/", {"reason": "pending review, launch a smoke test"},
                    format="json").json()
    assert body["state"] == "overridden" and body["run"]["override"]["by"] == "erin"
    assert not body["blocks_launch"]
    assert api.delete(base + f"probes/{always.probes.get().pk}/").status_code == 204


def test_cli_reward_check_probes_on_a_file(tmp_path):
    good = tmp_path / "gsm8k.py"
    good.write_text(get_template("gsm8k_exact"))
    mine = tmp_path / "probes.json"
    mine.write_text(json.dumps([{"name": "right", "solution_str": "#### 72", "ground_truth": "72", "lo": 1}]))
    out = StringIO()
    call_command("reward_check", str(good), "--probes", "--probe-file", str(mine), stdout=out)
    result = json.loads(out.getvalue())
    assert result["ok"] and len(result["results"]) == 8 and result["rule"] == "built-in probes must score below 0.5"
    bad = tmp_path / "always.py"
    bad.write_text(ALWAYS_ONE)
    with pytest.raises(CommandError, match=r"7 probe\(s\) fail: empty answer \(scored 1"):
        call_command("reward_check", str(bad), "--probes", stdout=StringIO())


def test_cli_reward_probes_show_run_and_override(project, engineer, always):
    with pytest.raises(CommandError, match="probes pending; it cannot launch"):
        call_command("reward_probes", "always", "--project", project.slug, stdout=StringIO())
    with pytest.raises(CommandError, match="add --user"):
        call_command("reward_probes", "always", "--project", project.slug, "--run", stdout=StringIO())
    with pytest.raises(CommandError, match="7 failing probes; it cannot launch"):
        call_command("reward_probes", "always", "--project", project.slug, "--run", "--user", "erin",
                     stdout=StringIO())
    out = StringIO()
    call_command("reward_probes", "always", "--project", project.slug, "--override", "baseline run on purpose",
                 "--user", "erin", stdout=out)
    assert json.loads(out.getvalue())["state"] == "overridden"
    assert AuditLog.objects.get(action="reward.probe_override").actor == engineer


def test_the_list_and_the_version_api_say_the_probe_state(as_user, api_for, project, engineer, always):
    assert "probes pending" in as_user(engineer).get(f"/p/{project.slug}/rewards/").content.decode()
    probes.probe_run_now(version=always.latest_version)
    assert "7 failing probes" in as_user(engineer).get(f"/p/{project.slug}/rewards/").content.decode()
    body = api_for(engineer).get(f"/api/projects/{project.slug}/rewards/{always.pk}/versions/").json()
    assert body[0]["probes"] == "failed"
