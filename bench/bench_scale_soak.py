"""bench_scale's soak: N viewers poll the big runs' pages for M minutes against `manage.py runserver` on loopback.

Each viewer loads its run's chart data once, then polls `live/` every 2 s as the run page does (new points since
its last step, new events since its last event); a writer adds a step (the ten charted series) to the first big
run every 2 s. Reported: p50 / p95 of the polls, errors, the web process's resident memory (after warm-up,
highest, at the end) and whether every viewer of the live run saw every step the writer added (drawn by its
chart load or a poll). Loopback only; every loop ends at the deadline.
"""
from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    import requests

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"the web server exited ({proc.returncode})")
        try:
            if requests.get(url, timeout=10).status_code < 500:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise SystemExit("the web server did not answer in time")


def soak(args, viewer, scale: str) -> None:
    import psutil
    import requests
    from bench_scale import CHART_NAMES
    from django.test import Client

    from webapp.runs.models import Job, MetricPoint

    slug = f"scale-{scale}"
    jobs = list(Job.objects.filter(project__slug=slug, name__startswith="7b-").order_by("pk"))
    live_job = jobs[0]
    start_step = live_job.last_step
    newest_event = {j.pk: j.events.order_by("-pk").values_list("pk", flat=True).first() or 0 for j in jobs}
    client = Client()
    client.force_login(viewer)
    cookie = client.cookies["sessionid"].value
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # The server's request log goes to a file: a pipe nobody reads fills after ~300 requests and then blocks
    # every request thread on its log line (which showed as every poll timing out).
    log_path = ROOT / "var" / "scale" / "soak-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("wb")
    proc = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    names = ",".join(CHART_NAMES)
    lat: list[float] = []
    errors: list[str] = []
    seen: dict[int, set[int]] = {}
    lock = threading.Lock()
    try:
        _wait(base + "/healthz", proc)
        server = psutil.Process(proc.pid)
        deadline = time.monotonic() + args.soak_minutes * 60
        rss = {"warm": None, "max": 0, "end": 0}
        added = []

        def viewer_loop(k: int) -> None:
            job = jobs[k % len(jobs)]
            s = requests.Session()
            s.cookies.set("sessionid", cookie)
            api = f"{base}/api/projects/{slug}/monitor/jobs/{job.pk}/"
            last, last_event = job.last_step, newest_event[job.pk]  # as the page starts: its events are in the HTML
            try:
                body = s.get(f"{api}metrics/?names={names}", timeout=120).json()
                last = body.get("last_step") or last
                if job.pk == live_job.pk:  # steps the writer added before this chart load are drawn by it
                    with lock:
                        seen.setdefault(k, set()).update(range(start_step + 1, last + 1))
            except (requests.RequestException, ValueError) as exc:
                with lock:
                    errors.append(f"metrics: {exc}")
            time.sleep(k * POLL_S / args.viewers)  # spread the polls over the interval
            while time.monotonic() < deadline:
                t = time.perf_counter()
                try:
                    r = s.get(f"{api}live/?names={names}&since_step={last}&since_event={last_event}", timeout=120)
                    ms = (time.perf_counter() - t) * 1000
                    if r.status_code != 200:
                        with lock:
                            errors.append(f"live {r.status_code}")
                    else:
                        body = r.json()
                        steps = {st for series in body["series"].values() for st in series["step"]}
                        last = max([last, *steps])
                        last_event = max([last_event, *(e["id"] for e in body["events"])])
                        with lock:
                            lat.append(ms)
                            if job.pk == live_job.pk:
                                seen.setdefault(k, set()).update(steps)
                except (requests.RequestException, ValueError) as exc:
                    with lock:
                        errors.append(f"live: {exc}")
                time.sleep(max(0.0, POLL_S - (time.perf_counter() - t)))

        def writer() -> None:
            step = start_step
            while time.monotonic() < deadline - 3 * POLL_S:
                step += 1
                MetricPoint.objects.bulk_create([MetricPoint(job=live_job, step=step, name=n, value=0.5,
                                                             wall_time=time.time(), attempt=20) for n in CHART_NAMES])
                Job.objects.filter(pk=live_job.pk).update(last_step=step)
                added.append(step)
                time.sleep(POLL_S)

        threads = [threading.Thread(target=viewer_loop, args=(k,), daemon=True) for k in range(args.viewers)]
        threads.append(threading.Thread(target=writer, daemon=True))
        load0 = os.getloadavg()[0]
        for th in threads:
            th.start()
        warm_at = time.monotonic() + 30
        while time.monotonic() < deadline:
            mem = server.memory_info().rss
            if rss["warm"] is None and time.monotonic() > warm_at:
                rss["warm"] = mem
            rss["max"] = max(rss["max"], mem)
            time.sleep(5)
        for th in threads:
            th.join(timeout=180)
        rss["end"] = server.memory_info().rss
        lat.sort()
        live_viewers = [k for k in range(args.viewers) if jobs[k % len(jobs)].pk == live_job.pk]
        lost = sum(1 for k in live_viewers if not set(added) <= seen.get(k, set()))
        mb = {k: (v or 0) / 2**20 for k, v in rss.items()}
        p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))] if lat else float("nan")
        print(f"\n== soak: {args.viewers} viewers x {args.soak_minutes:g} min polling live/ every {POLL_S:g} s "
              f"(runserver, loopback; load {load0:.1f} -> {os.getloadavg()[0]:.1f})")
        print(f"  polls {len(lat):,}: p50 {statistics.median(lat) if lat else float('nan'):.1f} ms, p95 {p95:.1f} ms "
              f"(target < 500 ms); errors {len(errors)}{' ' + repr(errors[:3]) if errors else ''}")
        print(f"  web process RSS: {mb['warm']:.0f} MB after warm-up, {mb['max']:.0f} MB highest, {mb['end']:.0f} MB "
              f"at the end; steps added {len(added)}, viewers of that run missing one: {lost} of {len(live_viewers)}")
        ok = lat and p95 < 500 and not errors and not lost
        print(f"  {'ok' if ok else 'MISS'}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        from bench_scale import restore_run

        restore_run(live_job.pk, start_step)
