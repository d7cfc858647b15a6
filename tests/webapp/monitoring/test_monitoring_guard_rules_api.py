"""Health rules through the API and the CLI: engineers edit, viewers read; hooks from the CLI for admins."""
from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def test_engineers_set_a_runs_rules_viewers_only_read_them(make_job, viewer, engineer, api_for):
    from tests.webapp.monitoring.conftest import default_config

    job = make_job(config={**default_config(), "guard_rules": []})
    url = f"/api/projects/{job.project.slug}/monitor/jobs/{job.pk}/guard-rules/"
    body = api_for(viewer).get(url).json()
    assert body["guard_rules"] == [] and "entropy_collapse" in body["builtin"]
    assert "samples/rollout" in body["builtin"]["zero_variance_groups"]["sources"]["verl"]
    rules = [{"rule": "entropy_collapse"}, {"rule": "kl", "threshold": 0.2, "action": "restore"}]
    assert api_for(viewer).put(url, {"guard_rules": rules}, format="json").status_code == 403
    r = api_for(engineer).put(url, {"guard_rules": rules}, format="json")
    assert r.status_code == 200 and [s["name"] for s in r.json()["status"]] == ["entropy_collapse", "kl"]
    job.refresh_from_db()
    assert job.config["guard_rules"] == rules
    r = api_for(engineer).put(url, {"guard_rules": [{"rule": "kl", "condition": "sideways"}]}, format="json")
    assert r.status_code == 400 and "condition must be one of" in r.json()["detail"]
    job.refresh_from_db()
    assert job.config["guard_rules"] == rules  # nothing half-written


def test_cli_shows_and_sets_rules_and_lists_hooks(make_job, engineer, viewer, admin_user, capsys):
    job = make_job()
    call_command("guard_rules", str(job.pk), "--set", '[{"rule": "grad_norm_spike"}]', "--user", engineer.username)
    job.refresh_from_db()
    assert job.config["guard_rules"] == [{"rule": "grad_norm_spike"}]
    call_command("guard_rules", str(job.pk))
    assert "grad_norm_spike" in capsys.readouterr().out
    with pytest.raises(CommandError, match="not an engineer"):
        call_command("guard_rules", str(job.pk), "--set", "[]", "--user", viewer.username)
    with pytest.raises(CommandError, match="Guard rules"):
        call_command("guard_rules", str(job.pk), "--set", '[{"rule": "nope"}]')
    call_command("hooks", job.project.slug, "add", "--name", "team", "--kind", "email", "--emails", "t@x.org",
                 "--user", admin_user.username)
    call_command("hooks", job.project.slug, "list")
    assert "team" in capsys.readouterr().out
    with pytest.raises(CommandError, match="not an admin"):
        call_command("hooks", job.project.slug, "add", "--name", "x", "--kind", "email", "--emails", "t@x.org",
                     "--user", engineer.username)
