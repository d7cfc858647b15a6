"""The soak's stack: start and stop `./run`, and read what broke from its logs, files and database."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from training.rundir import RunDir, read_jsonl  # noqa: E402

LOCKED = re.compile(r"database is locked|database table is locked")


# -- the stack ---------------------------------------------------------------------------------

def start_stack(var: Path, port: int, env: dict) -> subprocess.Popen:
    log = open(var / "run.out", "wb")  # noqa: SIM115 - lives as long as the stack
    return subprocess.Popen([str(ROOT / "run")], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"./run exited with {proc.returncode} before the site came up")
        try:
            if requests.get(base + "/healthz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise SystemExit("the site did not come up in time")


def stop_stack(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)  # ./run's cleanup stops its processes and training runs
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _setup_django(var: Path, env: dict) -> None:
    for key in ("WORKBENCH_VAR_DIR", "DATABASE_URL", "REDIS_URL"):
        if env.get(key):
            os.environ[key] = env[key]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def ensure_database(url: str) -> None:
    """A PostgreSQL database named in DATABASE_URL is created when missing (its server must be up)."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if not parsed.scheme.startswith("postgres"):
        return
    import psycopg

    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def lost_steps(job_ids: list[int]) -> tuple[int, dict]:
    """Steps in each attempt's metrics.jsonl that never reached the database."""
    from webapp.runs.models import Job, MetricPoint

    lost, detail = 0, {}
    for job in Job.objects.filter(pk__in=job_ids):
        if not job.run_dir:
            continue
        on_disk = {int(row["step"]) for attempt in RunDir(job.run_dir).attempts()
                   for row in read_jsonl(attempt.metrics) if isinstance(row.get("step"), int)}
        in_db = set(MetricPoint.objects.filter(job=job).values_list("step", flat=True).distinct())
        missing = on_disk - in_db
        if missing:
            detail[job.pk] = sorted(missing)[:20]
        lost += len(missing)
    return lost, detail


def duplicate_launches(job_ids: list[int]) -> int:
    """Jobs with more attempts than launches and resumes asked for: a launch message run twice."""
    from webapp.runs.models import Job

    return sum(1 for job in Job.objects.filter(pk__in=job_ids) if job.attempts.count() > 1)


def log_findings(var: Path) -> dict:
    logs = var / "logs"
    locked, tracebacks = 0, {}
    for path in sorted(logs.glob("*.log")):
        text = path.read_text(errors="replace")
        locked += len(LOCKED.findall(text))
        tracebacks[path.stem] = text.count("Traceback (most recent call last)")
    sup = (logs / "supervisor.log").read_text() if (logs / "supervisor.log").exists() else ""
    exits = re.findall(r"(\w+) exited \(status (\d+)\)", sup)
    return {"lock_errors_logs": locked, "tracebacks": tracebacks, "restarts": len(exits),
            "crashes": [f"{name} (status {rc})" for name, rc in exits]}
