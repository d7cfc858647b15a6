"""Soak test of `./run`'s stack: N minutes of concurrent use, then what broke.

    .venv/bin/python bench/soak.py --minutes 30                  # SQLite + ./run's private redis-server
    DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python bench/soak.py --minutes 10

It starts `./run` in a private var/ folder on a free loopback port and, until the time is up, imports
datasets (through the worker), submits reviews, launches short GRPO runs and rolls them back from a
checkpoint, polls the run pages and sends ping tasks through the broker. Then it stops the stack and
reports crashes and restarts (var/logs/supervisor.log), "database is locked" anywhere in the logs or
responses, server errors, ping tasks lost or run twice, metric steps in a run's metrics.jsonl missing from
the database, and page latency. Exit status 1 when any of crashes, lock errors, server errors, lost or
duplicated messages or lost steps is not zero. Loopback only; every loop is bounded by the deadline.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
SLUG = "demo"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak_stack import (  # noqa: E402
    LOCKED,
    _setup_django,
    duplicate_launches,
    ensure_database,
    log_findings,
    lost_steps,
    start_stack,
    stop_stack,
    wait_healthy,
)


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.latency: list[float] = []
        self.samples: list[str] = []

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def note(self, text: str) -> None:
        with self.lock:
            if len(self.samples) < 20 and text[:80] not in {t[:80] for t in self.samples}:
                self.samples.append(text[:300])


class Api:
    """Loopback HTTP with a token; counts requests, 5xx, lock errors and connection failures."""

    def __init__(self, base: str, token: str, tally: Tally) -> None:
        self.base, self.tally = base, tally
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def login(self, username: str = "admin", password: str = "admin") -> None:
        """Pages use the session, like a browser: sign in through the login form."""
        self.session.headers.pop("Authorization", None)
        self.session.get(self.base + "/login/", timeout=60)
        resp = self.session.post(self.base + "/login/", timeout=60, headers={"Referer": self.base + "/login/"},
                                 data={"username": username, "password": password,
                                       "csrfmiddlewaretoken": self.session.cookies.get("csrftoken", "")})
        if "sessionid" not in self.session.cookies:
            raise SystemExit(f"could not sign in to the pages: {resp.status_code}")

    def call(self, method: str, path: str, page: bool = False, **kwargs) -> requests.Response | None:
        started = time.perf_counter()
        try:
            resp = self.session.request(method, self.base + path, timeout=60, **kwargs)
        except requests.RequestException as exc:
            self.tally.add("connection_errors")
            self.tally.note(f"{method} {path}: {exc}")
            return None
        elapsed = time.perf_counter() - started
        self.tally.add("requests")
        if page:
            with self.tally.lock:
                self.tally.latency.append(elapsed)
        if page and (resp.status_code != 200 or "/login/" in resp.url):
            self.tally.add("page_failures")
            self.tally.note(f"{method} {path}: {resp.status_code} at {resp.url}")
        if resp.status_code >= 500:
            self.tally.add("server_errors")
            self.tally.note(f"{method} {path}: {resp.status_code} {resp.text[:300]}")
        if LOCKED.search(resp.text[:20000]):
            self.tally.add("lock_errors_http")
        return resp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sleep_until(stop: threading.Event, seconds: float) -> None:
    stop.wait(seconds)


# -- the actors -------------------------------------------------------------------------------

def importer(api: Api, tally: Tally, stop: threading.Event) -> None:
    """Upload a small preference or prompts file every ~15 s; it imports on the worker."""
    n = 0
    while not stop.is_set():
        n += 1
        salt = random.random()
        if n % 2:
            rows = [{"prompt": f"{i}+{i}= ({salt:.6f})", "chosen": str(2 * i), "rejected": str(2 * i + 1)}
                    for i in range(40)]
            name, kind = "soak-prefs", "preference"
        else:
            rows = [{"prompt": f"{i}+1= ({salt:.6f})", "ground_truth": str(i + 1)} for i in range(40)]
            name, kind = "soak-prompts", "prompts"
        body = "\n".join(json.dumps(r) for r in rows).encode()
        resp = api.call("POST", f"/api/projects/{SLUG}/datasets/", files={"file": (f"{name}.jsonl", body)},
                        data={"name": name, "kind": kind})
        if resp is not None and resp.status_code in (201, 202):
            status = resp.json()["status"]
            deadline = time.time() + 180
            while not status.get("finished") and time.time() < deadline and not stop.is_set():
                time.sleep(1)
                poll = api.call("GET", f"/api/projects/{SLUG}/datasets/imports/{status['id']}/")
                if poll is not None and poll.status_code == 200:
                    status = poll.json()["status"]
            ok = status.get("status") == "succeeded"
            tally.add("imports_ok" if ok else "imports_failed" if status.get("finished") else "imports_unfinished")
            if status.get("finished") and not ok:
                tally.note(f"import failed: {status.get('error')}")
        else:
            tally.add("imports_failed")
            if resp is not None:
                tally.note(f"import refused: {resp.status_code} {resp.text[:200]}")
        _sleep_until(stop, 15)


def reviewer(api: Api, tally: Tally, stop: threading.Event) -> None:
    """Review pairs one after the other, moving to another version when one is done."""
    while not stop.is_set():
        resp = api.call("GET", f"/api/projects/{SLUG}/review/versions/")
        versions = [v["version_id"] for v in (resp.json() if resp is not None and resp.status_code == 200 else [])]
        random.shuffle(versions)
        done_any = False
        for version in versions:
            item_resp = api.call("GET", f"/api/projects/{SLUG}/review/versions/{version}/next/")
            item = item_resp.json().get("item") if item_resp is not None and item_resp.status_code == 200 else None
            if not item:
                continue
            choice = random.choice(["left", "right", "approve", "swap"])
            sub = api.call("POST", f"/api/projects/{SLUG}/review/versions/{version}/items/{item['row_id']}/review/",
                           json={"choice": choice, "time_ms": 900})
            tally.add("reviews_ok" if sub is not None and sub.status_code == 201 else "reviews_failed")
            done_any = True
            break
        _sleep_until(stop, 0.5 if done_any else 5)


def _job(api: Api, job_id: int) -> dict:
    resp = api.call("GET", f"/api/projects/{SLUG}/jobs/{job_id}/")
    return resp.json() if resp is not None and resp.status_code == 200 else {}


def launcher(api: Api, tally: Tally, stop: threading.Event, jobs: list[int], steps: int, launch_until: float) -> None:
    """Launch a short GRPO run, roll it back from its first checkpoint, wait for both; again. No new run
    starts near the end, so that the runs have finished when the soak stops (their steps all counted)."""
    payload = {"kind": "grpo", "preset": "demo-cpu", "dataset": "demo-arithmetic", "model": "demo-tiny",
               "reward": ["exact-match"], "include_unreviewed": True,
               "set": {"max_steps": steps, "save_freq": max(2, steps // 4), "test_freq": max(2, steps // 4)}}
    final = {"succeeded", "failed", "cancelled", "lost"}
    while not stop.is_set() and time.time() < launch_until:
        resp = api.call("POST", f"/api/projects/{SLUG}/jobs/", json={**payload, "name": f"soak-{len(jobs) + 1}"})
        if resp is None or resp.status_code != 201:
            tally.add("launches_failed")
            tally.note(f"launch refused: {getattr(resp, 'status_code', None)} {getattr(resp, 'text', '')[:300]}")
            _sleep_until(stop, 10)
            continue
        parent = resp.json()["id"]
        jobs.append(parent)
        tally.add("launches")
        child = None
        started = time.time()
        while not stop.is_set() and time.time() - started < 600:
            job = _job(api, parent)
            if child is None:
                ck = api.call("GET", f"/api/projects/{SLUG}/monitor/jobs/{parent}/checkpoints/")
                rows = ck.json()["checkpoints"] if ck is not None and ck.status_code == 200 else []
                steps_saved = sorted(r["step"] for r in rows if r.get("status", "available") == "available")
                if steps_saved:
                    rb = api.call("POST", f"/api/projects/{SLUG}/monitor/jobs/{parent}/rollback/",
                                  json={"step": steps_saved[0], "reason": "soak", "hp_overrides": {"lr": "5e-4"}})
                    if rb is not None and rb.status_code == 201:
                        child = rb.json()["child"]
                        jobs.append(child)
                        tally.add("rollbacks")
                    else:
                        tally.add("rollbacks_failed")
                        tally.note(f"rollback refused: {getattr(rb, 'status_code', None)} "
                                   f"{getattr(rb, 'text', '')[:300]}")
                        child = -1
            states = [job.get("state")] + ([_job(api, child).get("state")] if child and child > 0 else [])
            if all(s in final for s in states) and (child is not None or job.get("state") in final):
                break
            _sleep_until(stop, 2)
        for s in [_job(api, parent).get("state")] + ([_job(api, child).get("state")] if child and child > 0 else []):
            tally.add(f"jobs_{s or 'unknown'}")


def poller(api: Api, tally: Tally, stop: threading.Event, jobs: list[int]) -> None:
    """What a user watching a run loads: the monitor page, its live poll, the job page, the job list."""
    api.login()
    while not stop.is_set():
        job = random.choice(jobs[-4:]) if jobs else None
        if job is None:
            api.call("GET", f"/p/{SLUG}/jobs/", page=True)
        else:
            api.call("GET", f"/p/{SLUG}/monitor/jobs/{job}/", page=True)
            api.call("GET", f"/api/projects/{SLUG}/monitor/jobs/{job}/live/?since_step=0", page=True)
            api.call("GET", f"/p/{SLUG}/jobs/{job}/", page=True)
        _sleep_until(stop, 0.5)


def pinger(stop: threading.Event, tally: Tally, project_id: int) -> None:
    """Ping tasks through the broker (each writes one audit row on the worker): counts lost and doubled."""
    from jobs.celery import app

    while not stop.is_set():
        try:
            app.send_task("jobs.tasks.ping", args=[project_id])
            tally.add("pings_sent")
        except Exception as exc:  # noqa: BLE001 - a broker outage is a finding, not a crash of the soak
            tally.add("pings_send_failed")
            tally.note(f"ping not sent: {exc}")
        _sleep_until(stop, 2)


def bad_messages(stop: threading.Event, tally: Tally, every_s: float) -> None:
    """Now and then a message the worker cannot use: a task body that is not JSON, a task nobody
    registered, and a queue entry (file or Redis list item) that is not JSON at all. The worker must survive."""
    import uuid

    from django.conf import settings

    from jobs.celery import app

    n = 0
    while not stop.wait(every_s):
        n += 1
        headers = {"task": "jobs.tasks.ping", "id": str(uuid.uuid4()), "lang": "py"}
        with app.producer_or_acquire() as producer:
            if n % 2:
                producer.publish(b'{"half": ', routing_key="cpu", exchange="", headers=headers,
                                 content_type="application/json", content_encoding="utf-8")
            else:
                app.send_task("jobs.tasks.no_such_task", args=[1], producer=producer)
        if settings.CELERY_BROKER_URL.startswith("filesystem"):
            folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
            (folder / f"{0:020d}_soak{n}.cpu.msg").write_bytes(b'{"half": ')
        else:  # a queue entry that is not a message at all
            import redis

            redis.Redis.from_url(settings.REDIS_CLIENT_URL).lpush("cpu", b'{"half": ')
        tally.add("bad_messages_injected")


def worker_killer(stop: threading.Event, tally: Tally, var: Path, at_s: float, result: dict) -> None:
    """Kill the worker once (SIGKILL, as the OOM killer would); ./run must bring one back."""
    if stop.wait(at_s):
        return
    beats = var / "heartbeats"
    fresh = [p for p in beats.glob("*") if not p.name.startswith(".") and time.time() - p.stat().st_mtime < 15
             and "cpu" in (json.loads(p.read_text()).get("queues") or [])]  # the cpu worker (not usercode)
    if not fresh:
        result["worker_kill"] = "no live worker to kill"
        return
    name, pid = fresh[0].name, json.loads(fresh[0].read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    killed_at = time.time()
    tally.add("workers_killed")
    while not stop.wait(0.5):
        for p in beats.glob("*"):
            try:
                info = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if p.name == name and info.get("pid") != pid and info.get("at", 0) > killed_at:
                result["worker_back_after_s"] = round(time.time() - killed_at, 1)
                return
    result["worker_back_after_s"] = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--steps", type=int, default=40, help="max_steps of each launched run")
    parser.add_argument("--pollers", type=int, default=2)
    parser.add_argument("--bad-message-every", type=float, default=300, help="seconds; 0: never")
    parser.add_argument("--kill-worker-at", type=float, default=0,
                        help="minutes into the soak to SIGKILL the worker once; 0: never")
    parser.add_argument("--var", default="", help="the stack's var folder (default: a new temporary one)")
    parser.add_argument("--json", default="", help="also write the report here")
    args = parser.parse_args()

    var = Path(args.var or tempfile.mkdtemp(prefix="soak-", dir=ROOT / "var" if (ROOT / "var").exists() else None))
    var.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("WORKBENCH_VAR_DIR", "PORT", "HOST")}
    env.update(WORKBENCH_VAR_DIR=str(var), PORT=str(port), HOST="127.0.0.1", DATASET_SYNC_IMPORT_MB="0",
               PYTHONUNBUFFERED="1")
    base = f"http://127.0.0.1:{port}"
    tally, stop, jobs, kill_result = Tally(), threading.Event(), [], {}
    backend = ("postgres" if env.get("DATABASE_URL", "").startswith("postgres") else "sqlite") + " + " + (
        "redis" if env.get("REDIS_URL") else "default broker")
    print(f"soak: {backend}, {args.minutes:g} min, var {var}, {base}", flush=True)
    ensure_database(env.get("DATABASE_URL", ""))
    proc = start_stack(var, port, env)
    threads: list[threading.Thread] = []
    started = time.time()
    try:
        wait_healthy(base, proc, 600)
        out = subprocess.run([PY, "manage.py", "drf_create_token", "admin"], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True).stdout
        token = out.split()[2]
        _setup_django(var, env)
        from webapp.core.models import AuditLog, Project

        project = Project.objects.get(slug=SLUG)
        pings_before = AuditLog.objects.filter(action="worker.ping", project=project).count()
        api = Api(base, token, tally)
        actors = [(importer, (api, tally, stop)), (reviewer, (api, tally, stop)),
                  (launcher, (api, tally, stop, jobs, args.steps, time.time() + args.minutes * 60
                              - min(90.0, args.minutes * 15))), (pinger, (stop, tally, project.pk))]
        actors += [(poller, (Api(base, token, tally), tally, stop, jobs))] * args.pollers
        if args.bad_message_every > 0:
            actors.append((bad_messages, (stop, tally, args.bad_message_every)))
        if args.kill_worker_at > 0:
            actors.append((worker_killer, (stop, tally, var, args.kill_worker_at * 60, kill_result)))
        threads = [threading.Thread(target=fn, args=a, daemon=True) for fn, a in actors]
        for t in threads:
            t.start()
        t0 = time.time()
        while time.time() - t0 < args.minutes * 60:
            time.sleep(min(30, args.minutes * 60 - (time.time() - t0)))
            print(f"  {(time.time() - t0) / 60:.1f} min: {json.dumps(tally.counts, sort_keys=True)}", flush=True)
        stop.set()
        for t in threads:
            t.join(120)
        # Let the last runs finish (bounded), then one more sync so their last lines are in.
        from webapp.runs.models import Job

        deadline = time.time() + 300
        while time.time() < deadline and Job.objects.filter(pk__in=jobs, state__in=["queued", "starting",
                                                                                   "running"]).exists():
            time.sleep(2)
        time.sleep(6)
        deadline = time.time() + 60
        sent = tally.counts.get("pings_sent", 0)
        while time.time() < deadline and (AuditLog.objects.filter(action="worker.ping", project=project).count()
                                          - pings_before) < sent:
            time.sleep(1)
        received = AuditLog.objects.filter(action="worker.ping", project=project).count() - pings_before
        steps_lost, lost_detail = lost_steps(jobs)
        dupes = duplicate_launches(jobs)
        states = dict(Job.objects.filter(pk__in=jobs).values_list("pk", "state"))
    finally:
        stop.set()
        stop_stack(proc)
    found = log_findings(var)
    lat = sorted(tally.latency)

    def pct(p: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else None

    report = {
        "backend": backend, "minutes": args.minutes, "wall_minutes": round((time.time() - started) / 60, 1),
        # Exits we caused (the killed worker) are restarts, not crashes.
        "crashes": len(found["crashes"]) - tally.counts.get("workers_killed", 0), "crashed": found["crashes"],
        "restarts": found["restarts"], **kill_result,
        "lock_errors": found["lock_errors_logs"] + tally.counts.get("lock_errors_http", 0),
        "server_errors": tally.counts.get("server_errors", 0), "page_failures": tally.counts.get("page_failures", 0),
        "connection_errors": tally.counts.get("connection_errors", 0),
        "pings_sent": sent, "pings_received": received, "messages_lost": max(0, sent - received),
        "messages_duplicated": max(0, received - sent), "duplicate_launches": dupes,
        "jobs": len(jobs), "job_states": dict(Counter(states.values())), "metric_steps_lost": steps_lost,
        "lost_detail": lost_detail, "page_requests": len(lat), "page_p50_ms": pct(0.5), "page_p95_ms": pct(0.95),
        "tracebacks_in_logs": found["tracebacks"], "counts": tally.counts, "samples": tally.samples, "var": str(var),
    }
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    bad = (report["crashes"] or report["lock_errors"] or report["server_errors"] or report["page_failures"]
           or report["messages_lost"]
           or report["messages_duplicated"] or report["metric_steps_lost"] or report["duplicate_launches"]
           or (args.kill_worker_at > 0 and not report.get("worker_back_after_s")))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
