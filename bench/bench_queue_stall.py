"""Queue delay under hostile test-runs: how long a ping waits on the cpu queue while rewards that never return
are being test-run, with the worker layout before the usercode queue and after it, in the same run.

    .venv/bin/python bench/bench_queue_stall.py [--hostile 2] [--pings 20] [--json out.json]

Both legs use a scratch var folder (SQLite, the folder broker) and real Celery workers (prefork, 2 slots each,
as `./run` starts them), `--hostile` test-runs of a reward that never returns (it swallows the sandbox's
timeout, so only killing its sandbox stops it), then one ping a second (`jobs.tasks.ping`: broker, worker,
database) once the first hostile test-run is running. The delay of a ping is from sending it to its audit row.

(a) before: one worker on the cpu queue; test-runs go to the cpu queue and get 60 s of wall clock (the old
    layout and limit, as the audit measured it: a ping waited 57 s);
(b) after: a cpu worker and a usercode worker; test-runs go to the usercode queue (REWARD_TEST_RUN_TIME_LIMIT_S,
    30 s by default).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEVER_RETURNS = '''
import time
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    while True:
        try:
            time.sleep(3600)
        except BaseException:
            pass
    return 0.0
'''


def start_workers(layout: list[str], env: dict, log: Path) -> list[subprocess.Popen]:
    procs = []
    with open(log, "ab") as fh:
        for q in layout:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "jobs", "worker", "-Q", q, "--concurrency", "2", "-l", "info",
                 "-n", f"{q}-bench@%h", "--without-mingle", "--without-gossip"],
                cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.time() + 180
    while log.read_bytes().count(b"ready.") < len(procs):
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit("workers did not start:\n" + log.read_text()[-3000:])
        time.sleep(0.2)
    return procs


def stop_workers(procs: list[subprocess.Popen]) -> None:
    import signal

    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def leg(name: str, *, layout: list[str], test_run_queue: str, wall_s: float, hostile: int, pings: int,
        workdir: Path) -> dict:
    from django.db import close_old_connections

    from jobs.celery import app
    from webapp.core.models import AuditLog, Project
    from webapp.core.queue import RUN_REWARD_TEST
    from webapp.datasets.models import Dataset, DatasetKind, DatasetRow, DatasetVersion, VersionStatus
    from webapp.rewards.models import RewardTestRun, RewardTestRunState
    from webapp.rewards.services import reward_function_create

    project = Project.objects.create(slug=f"stall-{name}", name=f"Stall {name}")
    ds = Dataset.objects.create(project=project, name="rows", kind=DatasetKind.PROMPTS)
    version = DatasetVersion.objects.create(dataset=ds, number=1, status=VersionStatus.READY, row_count=20)
    DatasetRow.objects.bulk_create([DatasetRow(version=version, index=i, prompt=f"{i}+1=", prompt_text=f"{i}+1=",
                                               ground_truth=str(i + 1), row_hash=f"{name}{i:060d}") for i in range(20)])
    fn = reward_function_create(project=project, user=None, name="hangs", source=NEVER_RETURNS)
    env = dict(os.environ, REWARD_TEST_RUN_TIME_LIMIT_S=str(wall_s))
    procs = start_workers(layout, env, workdir / f"{name}.log")
    try:
        runs = [RewardTestRun.objects.create(function=fn, version=fn.latest_version, source=fn.latest_version.source,
                                             sha256=fn.latest_version.sha256, dataset_version=version, mode="reference",
                                             sample_count=20, limit=20, state=RewardTestRunState.QUEUED)
                for _ in range(hostile)]
        for run in runs:  # as reward_test_run_create sends them, to the queue of this layout
            app.send_task(RUN_REWARD_TEST, args=[run.pk], queue=test_run_queue)
        t0 = time.time()
        while not RewardTestRun.objects.filter(pk__in=[r.pk for r in runs], state="running").exists():
            if time.time() - t0 > 120:
                raise SystemExit("no hostile test-run started")
            time.sleep(0.1)
        sent = []
        for _ in range(pings):
            sent.append(time.time())
            app.send_task("jobs.tasks.ping", args=[project.pk], queue="cpu")
            time.sleep(1.0)
        deadline = time.time() + 300
        while AuditLog.objects.filter(action="worker.ping", project=project).count() < pings:
            if time.time() > deadline:
                raise SystemExit(f"{name}: pings lost")
            time.sleep(0.2)
            close_old_connections()
        done = sorted(a.timestamp() for a in AuditLog.objects.filter(action="worker.ping", project=project)
                      .values_list("created_at", flat=True))
        delays = [d - s for s, d in zip(sent, done, strict=True)]  # in order: one slot frees, they go in turn
    finally:
        stop_workers(procs)
    return {"leg": name, "layout": layout, "test_runs_on": test_run_queue, "test_run_wall_s": wall_s,
            "hostile": hostile, "pings": pings, "median_s": round(statistics.median(delays), 2),
            "max_s": round(max(delays), 2), "mean_s": round(statistics.mean(delays), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile", type=int, default=2)
    parser.add_argument("--pings", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-queue-stall-"))
    for var in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(var, None)
    os.environ.update(WORKBENCH_VAR_DIR=str(workdir / "var"), DJANGO_SETTINGS_MODULE="webapp.settings",
                      PYTHONUNBUFFERED="1")
    sys.path.insert(0, str(ROOT))
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    import django

    django.setup()
    from training.sandbox import isolation_info

    print(f"isolation: {isolation_info()['mode']}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"{args.hostile} hostile test-runs, {args.pings} pings; scratch {workdir}")
    results = [
        leg("before", layout=["cpu"], test_run_queue="cpu", wall_s=60.0, hostile=args.hostile, pings=args.pings,
            workdir=workdir),
        leg("after", layout=["cpu", "usercode"], test_run_queue="usercode", wall_s=30.0, hostile=args.hostile,
            pings=args.pings, workdir=workdir),
    ]
    for r in results:
        print(f"{r['leg']:>6}: workers {'+'.join(r['layout'])}, test-runs on {r['test_runs_on']} "
              f"({r['test_run_wall_s']:g} s each): ping delay median {r['median_s']} s, max {r['max_s']} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
