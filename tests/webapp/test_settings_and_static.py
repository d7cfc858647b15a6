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
    env.update(HTTPS="true", SECRET_KEY="x" * 60 + "-Prod-Key-9f8e7d6c5b4a", ALLOWED_HOSTS="workbench.example",
               WORKBENCH_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3")
    proc = subprocess.run([sys.executable, "manage.py", "check", "--deploy"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Django's deployment checks are warnings: none of them may fire.
    assert "security." not in proc.stdout + proc.stderr


def _settings_value(env: dict, expr: str) -> str:
    code = f"import django; django.setup(); from django.conf import settings; print({expr})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_debug_is_off_unless_asked_for_and_a_secret_key_is_made_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE", "DEBUG"}}
    env.update(WORKBENCH_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="webapp.settings")
    assert _settings_value(env, "settings.DEBUG") == "False"
    key_file = tmp_path / "secret_key"
    key = key_file.read_text().strip()
    assert len(key) >= 50 and (key_file.stat().st_mode & 0o777) == 0o600
    assert _settings_value(env, "settings.SECRET_KEY") == key  # the same key on the next start
    assert _settings_value(dict(env, SECRET_KEY="from-env-" + "k" * 50), "settings.SECRET_KEY").startswith("from-env")
    assert _settings_value(dict(env, DEBUG="true"), "settings.DEBUG") == "True"


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


def test_templates_have_no_inline_scripts_or_event_handlers():
    """The Content-Security-Policy allows scripts only from static files (data goes in json_script blocks)."""
    handler = re.compile(r"""<[^>]*\son[a-z]+\s*=\s*["']""", re.I)
    inline = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "templates").rglob("*.html")
                 if handler.search(p.read_text()) or inline.search(p.read_text())]
    assert offenders == []


@pytest.mark.django_db
def test_every_response_carries_the_csp(client, admin_user):
    client.force_login(admin_user)
    for path in ("/", "/login/", "/p/acme/", "/api/projects/", "/static/css/app.css"):
        policy = client.get(path)["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "unsafe-eval" not in policy and "frame-ancestors 'none'" in policy
