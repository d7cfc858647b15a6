"""Settings from the environment, production checks, and assets served locally (no CDN)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp.env import envbool, envint, parse_database_url

ROOT = Path(__file__).resolve().parents[2]


def test_typed_env_helpers(monkeypatch):
    monkeypatch.setenv("X_FLAG", "yes")
    monkeypatch.setenv("X_NUM", "12")
    assert envbool("X_FLAG", False) is True and envint("X_NUM", 0) == 12
    monkeypatch.setenv("X_NUM", "twelve")
    with pytest.raises(ImproperlyConfigured, match="X_NUM must be an integer"):
        envint("X_NUM", 0)


def test_database_url_parsing():
    pg = parse_database_url("postgres://app:s%40cret@db.local:5433/workbench")
    assert (pg["ENGINE"], pg["NAME"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"]) == (
        "django.db.backends.postgresql", "workbench", "app", "s@cret", "db.local", "5433")
    assert parse_database_url("sqlite:////tmp/x.db")["NAME"] == "/tmp/x.db"
    with pytest.raises(ImproperlyConfigured):
        parse_database_url("mysql://x/y")


def test_production_settings_pass_check_deploy(tmp_path):
    # (the browser tests set DJANGO_ALLOW_ASYNC_UNSAFE for Playwright; a deployment never does)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}}
    env.update(DEBUG="false", SECRET_KEY="x" * 60 + "-Prod-Key-9f8e7d6c5b4a", ALLOWED_HOSTS="workbench.example",
               WORKBENCH_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3")
    proc = subprocess.run([sys.executable, "manage.py", "check", "--deploy"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Django's deployment checks are warnings: none of them may fire.
    assert "security." not in proc.stdout + proc.stderr


def test_production_refuses_to_start_without_secret(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    env.update(DEBUG="false", WORKBENCH_VAR_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "SECRET_KEY" in proc.stderr


def test_templates_load_no_remote_assets():
    remote = re.compile(r"""(src|href)\s*=\s*["']\s*(https?:)?//""", re.I)
    offenders = [str(p) for p in (ROOT / "templates").rglob("*.html") if remote.search(p.read_text())]
    assert offenders == []


@pytest.mark.django_db
def test_plotly_js_is_served_from_the_plotly_package(client, admin_user):
    client.force_login(admin_user)
    resp = client.get("/static/plotly/plotly.min.js")
    assert resp.status_code == 200
    body = b"".join(resp.streaming_content) if hasattr(resp, "streaming_content") else resp.content
    assert len(body) > 1_000_000 and b"plotly" in body[:2000].lower()
