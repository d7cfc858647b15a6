"""What a team does with real-volume runs, timed through the whole Django stack, against its targets.

    .venv/bin/python bench/make_big_run.py --scale small && .venv/bin/python bench/make_big_run.py --scale large
    .venv/bin/python bench/bench_scale.py                      # both sizes, and how each figure grows
    .venv/bin/python bench/bench_scale.py --soak-minutes 5     # then 50 viewers poll run pages for 5 minutes
    .venv/bin/python bench/bench_scale.py --scales large --only live        # just the live poll

Reads the scratch database bench/make_big_run.py wrote (--db, default workbench_scale; never the app's).
Each figure is p50 / p95 over --repeat requests (django.test.Client: middleware, auth, access checks,
queries, templates or JSON), with the SQL queries one request takes, next to its target; at each scale
present, then each figure's growth from the small to the large scale. Work that is not a request (sync of one
new step, a retention sweep) is timed as the worker runs it. The load average stands beside every figure:
the machine may be shared. The soak (--soak-minutes) serves the app with `manage.py runserver` on loopback
and reports the web process's memory at the start and end, p95 and errors.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from make_big_run import DEFAULT_DB, GROUP, PROMPTS, SCALES, metric_names, rollout_row  # noqa: E402

CHART_NAMES = metric_names(10)  # the run page's default charts ask for about ten series at once


def load() -> float:
    return os.getloadavg()[0]


class Timer:
    def __init__(self, repeat: int, only: list[str] | None = None):
        self.repeat = repeat
        self.only = only or []
        self.rows: list[dict] = []

    def wanted(self, label: str) -> bool:
        """--only: time just the actions whose label holds one of its words."""
        return not self.only or any(word in label for word in self.only)

    def measure(self, label: str, target_ms: float, fn, *, max_queries: int | None = None, repeat: int | None = None,
                warmup: int = 2) -> dict | None:
        if not self.wanted(label):
            return None
        for _ in range(warmup):
            fn()
        with count_queries() as executed:
            fn()
        times, cpu = [], []
        load0 = load()
        for _ in range(repeat or self.repeat):
            t, c = time.perf_counter(), time.process_time()
            fn()
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        return self.add(label, target_ms, times, cpu, len(executed), max_queries, load0)

    def add(self, label, target_ms, times, cpu, queries, max_queries, load0) -> dict:
        times = sorted(times)
        row = {"label": label, "target": target_ms, "p50": statistics.median(times),
               "p95": times[min(len(times) - 1, round(0.95 * (len(times) - 1)))], "cpu": statistics.median(cpu),
               "queries": queries, "max_queries": max_queries, "load": (load0 + load()) / 2}
        row["ok"] = row["p50"] < target_ms and (max_queries is None or queries <= max_queries)
        qlimit = f"/{max_queries}" if max_queries is not None else ""
        verdict = "ok" if row["ok"] else "MISS"
        print(f"  {label:<56} p50 {row['p50']:7.1f}  p95 {row['p95']:7.1f}  cpu {row['cpu']:7.1f} ms  "
              f"< {target_ms:>4.0f} ms  {queries:>3}{qlimit} q  load {row['load']:4.1f}  {verdict}", flush=True)
        self.rows.append(row)
        return row


class count_queries:
    """The SQL statements run inside the block (the test client's requests reset Django's own query log)."""

    def __enter__(self) -> list[str]:
        from django.db import connection

        self.executed: list[str] = []

        def wrapper(execute, sql, params, many, context):
            self.executed.append(sql)
            return execute(sql, params, many, context)

        self.cm = connection.execute_wrapper(wrapper)
        self.cm.__enter__()
        return self.executed

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc)


def check(resp, expected: int = 200):
    if resp.status_code != expected:
        raise SystemExit(f"{resp.request['PATH_INFO']}?{resp.request.get('QUERY_STRING', '')} answered "
                         f"{resp.status_code}: {resp.content[:300]!r}")
    return resp


def run_figures(timer: Timer, slug: str, client) -> None:
    from webapp.monitoring.samples import prompt_key
    from webapp.runs.models import Job

    jobs = list(Job.objects.filter(project__slug=slug, name__startswith="7b-").order_by("pk"))
    job = jobs[0]
    api = f"/api/projects/{slug}/monitor/jobs/{job.pk}/"
    names = ",".join(CHART_NAMES)
    last_event = job.events.order_by("-pk").values_list("pk", flat=True).first() or 0
    timer.measure("run page data (10 series, downsampled)", 150,
                  lambda: check(client.get(f"{api}metrics/?names={names}")))
    timer.measure("live poll of new points", 30, lambda: check(client.get(
        f"{api}live/?names={names}&since_step={job.last_step - 1}&since_event={last_event}")))
    ids = ",".join(str(j.pk) for j in jobs)
    timer.measure("compare of 5 runs (one metric)", 300, lambda: check(client.get(
        f"/api/projects/{slug}/monitor/compare/?name=critic/score/mean&jobs={ids}")))
    samples = f"/p/{slug}/monitor/jobs/{job.pk}/samples/?kind=rollout"
    rollout = Path(job.run_dir) / "samples" / "rollout"
    steps = sorted(int(p.stem) for p in rollout.glob("*.jsonl"))
    with (rollout / f"{steps[-1]}.jsonl").open() as fh:
        first = json.loads(fh.readline())
    key = prompt_key(first["input"])
    if timer.wanted("samples: a step page"):
        t = time.perf_counter()
        check(client.get(f"{samples}&view=step&step={steps[0]}"))
        print(f"  (a step's first visit, which indexes its {PROMPTS * GROUP}-sample dump: "
              f"{(time.perf_counter() - t) * 1000:.0f} ms)")
    timer.measure("samples: a step page", 200, lambda: check(client.get(f"{samples}&view=step&step={steps[-1]}")))
    timer.measure(f"samples: one prompt across {len(steps)} logged steps", 300,
                  lambda: check(client.get(f"{samples}&view=prompt&prompt={key}")))
    timer.measure("samples: token view of a 1,024-token sample", 100,
                  lambda: check(client.get(f"{samples}&view=tokens&step={steps[-1]}&offset=0")))
    timer.measure("checkpoint table (200 checkpoints, page)", 100,
                  lambda: check(client.get(f"/p/{slug}/monitor/jobs/{job.pk}/checkpoints/")))
    timer.measure("checkpoint table (200 checkpoints, API)", 100, lambda: check(client.get(f"{api}checkpoints/")))
    timer.measure("project runs list (200 runs, page)", 150, lambda: check(client.get(f"/p/{slug}/jobs/")))


def review_figures(timer: Timer, pairs: int) -> None:
    import bench_review
    from django.contrib.auth import get_user_model
    from django.test import Client

    from webapp.datasets.models import DatasetRow, DatasetVersion

    version = DatasetVersion.objects.filter(dataset__project__slug=bench_review.SLUG,
                                            dataset__name=f"bench-{pairs}").first()
    if version is None:
        print(f"  (no {pairs:,}-pair dataset: run make_big_run.py first)")
        return
    user = get_user_model().objects.get(username="bench-r3")
    reviewer = Client()
    reviewer.force_login(user)
    api = f"/api/projects/{bench_review.SLUG}/review/versions/{version.pk}/"
    state = {"after": None}

    def next_claim():
        url = api + "next/" + (f"?after={state['after']}" if state["after"] is not None else "")
        item = check(reviewer.get(url)).json()["item"]
        state["after"] = item["index"]

    timer.measure(f"review next (a new claim) at {pairs:,} pairs", 20, next_claim, max_queries=5)
    open_rows = iter(DatasetRow.objects.filter(version=version, review_assignments__reviewer=user,
                                               reviews__isnull=True).order_by("index").values_list("pk", flat=True))

    def submit():
        check(reviewer.post(api + f"items/{next(open_rows)}/review/", {"choice": "left", "time_ms": 5000},
                            content_type="application/json"), 201)

    timer.measure(f"review submit at {pairs:,} pairs", 20, submit, max_queries=5, repeat=min(timer.repeat, 20),
                  warmup=1)


def sync_figures(timer: Timer, slug: str) -> None:
    """A live attempt of the running big run gets one step: its metrics line, its 512-sample dump, a checkpoint."""
    from make_big_run import metric_names as names_of
    from make_big_run import sparse_checkpoint

    from training import rollouts
    from training.ingest import write_rollout_summary
    from webapp.monitoring.services.checkpoints import retention_apply
    from webapp.runs.models import Checkpoint, Job, JobAttempt
    from webapp.runs.services.sync import sync_job

    job = Job.objects.filter(project__slug=slug, name__startswith="7b-", state="running").order_by("pk").first()
    number = job.attempts.count() + 1
    adir = Path(job.run_dir) / "attempts" / str(number)
    adir.mkdir(parents=True, exist_ok=True)
    JobAttempt.objects.create(job=job, number=number, reason="resume", state="running", supervisor_pid=os.getpid())
    config = dict(job.config)
    # Nothing of the generated run is deleted: retention still weighs all 200+ checkpoints and the whole rollout
    # store at each sync, with limits that keep them all.
    Job.objects.filter(pk=job.pk).update(config={**config, "hp": {**config["hp"], "keep_last_k": 10_000,
                                                                  "rollout_keep_last": 100_000,
                                                                  "rollout_max_mb": 1e9}})
    import random

    rng = random.Random(1)
    rows = [rollout_row(rng, 0, p, i) for p in range(PROMPTS) for i in range(GROUP)]
    state = {"step": job.last_step}
    metric_list = names_of(150)
    made = []

    def one_step():  # the trainer's side, not timed
        state["step"] += 1
        step = state["step"]
        for r in rows:
            r["step"] = step
        rollouts.write_step(job.run_dir, step, rows)
        write_rollout_summary(job.run_dir, step)  # as both backends' trainers do
        folder = Path(job.run_dir) / "checkpoints" / f"global_step_{step}"
        sparse_checkpoint(folder, step, number)
        made.append(folder)
        (adir / "heartbeat").write_text(json.dumps({"time": time.time()}))
        with (adir / "metrics.jsonl").open("a") as fh:
            fh.write(json.dumps({"step": step, "data": {n: rng.random() for n in metric_list}}) + "\n")

    try:
        times, cpu, load0 = [], [], load()
        for i in range(min(timer.repeat, 10) + 1):
            one_step()
            with count_queries() as executed:
                t, c = time.perf_counter(), time.process_time()
                sync_job(Job.objects.get(pk=job.pk))
                elapsed, used = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
            if i:
                times.append(elapsed)
                cpu.append(used)
        timer.add("sync of one new step (150 metrics, 512 samples, a ckpt)", 100, times, cpu, len(executed), None,
                  load0)
    finally:  # even when a sync fails (another process holding the run's rows), so the run stays as generated
        # Put the run back as it was: the bench's steps, checkpoints and attempt go.
        Checkpoint.objects.filter(job=job, step__gt=job.last_step).delete()
        restore_run(job.pk, job.last_step)
        JobAttempt.objects.filter(job=job, number=number).delete()
        Job.objects.filter(pk=job.pk).update(config=config, state="running")
        for folder in made:
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
        for step in range(job.last_step + 1, state["step"] + 1):
            (Path(job.run_dir) / "samples" / "rollout" / f"{step}.jsonl").unlink(missing_ok=True)
            rollouts.summary_path(job.run_dir, step).unlink(missing_ok=True)
        for f in adir.iterdir():
            f.unlink()
        adir.rmdir()

    # A retention sweep over 200 checkpoints (keep the last 3): a throwaway run, built anew for each sweep.
    sweep = Job.objects.create(project=job.project, name="retention-sweep", kind="grpo", state="succeeded",
                               config={"hp": {"keep_last_k": 3}}, run_dir=str(Path(job.run_dir).parent / "sweep"))
    try:
        def build():
            objs = []
            for k in range(1, 201):
                folder = Path(sweep.run_dir) / "checkpoints" / f"global_step_{k * 100}"
                sparse_checkpoint(folder, k * 100, 1)
                objs.append(Checkpoint(job=sweep, step=k * 100, path=str(folder), size_bytes=1))
            Checkpoint.objects.filter(job=sweep).delete()
            Checkpoint.objects.bulk_create(objs)

        times, cpu, load0 = [], [], load()
        for _ in range(3):
            build()
            with count_queries() as executed:
                t, c = time.perf_counter(), time.process_time()
                deleted = retention_apply(job=sweep)
                times.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
            assert len(deleted) == 197, deleted
        timer.add("retention sweep over 200 checkpoints (197 deleted)", 1000, times, cpu, len(executed), None, load0)
    finally:
        import shutil

        sweep.delete()
        shutil.rmtree(Path(job.run_dir).parent / "sweep", ignore_errors=True)


def restore_run(job_id: int, last_step: int) -> None:
    """Drop the points a benchmark added after `last_step`, and their rollups, so the run is as generated."""
    from webapp.monitoring.models import MetricRollup, MetricRollupState
    from webapp.monitoring.rollup import LEVELS, rollup_update, size
    from webapp.runs.models import Job, MetricPoint, RunEvent

    names = set(MetricPoint.objects.filter(job_id=job_id, step__gt=last_step).values_list("name", flat=True))
    if names:
        MetricPoint.objects.filter(job_id=job_id, step__gt=last_step).delete()
        for level in LEVELS:
            MetricRollup.objects.filter(job_id=job_id, level=level, bucket__gt=last_step // size(level)).delete()
        tracked = set(MetricRollupState.objects.filter(job_id=job_id, name__in=names).values_list("name", flat=True))
        rollup_update(job_id, [(last_step, n) for n in tracked])
        MetricRollupState.objects.filter(job_id=job_id, name__in=names).update(through_step=last_step)
    RunEvent.objects.filter(job_id=job_id, step__gt=last_step).delete()
    Job.objects.filter(pk=job_id).update(last_step=last_step)


def growth_word(ratio: float, size_ratio: float) -> str:
    if ratio < 1.5:
        return "constant"
    if ratio < size_ratio ** 0.5:
        return "sub-linear (~log)"
    return "linear" if ratio < size_ratio * 1.5 else "super-linear"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=os.environ.get("SCALE_DATABASE_URL", DEFAULT_DB))
    ap.add_argument("--root", type=Path, default=ROOT / "var" / "scale" / "runs")
    ap.add_argument("--scales", default="small,large")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--soak-minutes", type=float, default=0.0)
    ap.add_argument("--viewers", type=int, default=50)
    ap.add_argument("--only", default="", help="comma-separated words: time only the actions whose label holds "
                                                "one (e.g. --only live; --only none with --soak-minutes: the soak)")
    args = ap.parse_args()
    name = args.db.rsplit("/", 1)[-1]
    if name in ("workbench", "postgres") or name.startswith("test"):
        raise SystemExit(f"refusing database {name!r}: use the scratch database make_big_run.py wrote")
    os.environ["DATABASE_URL"] = args.db
    os.environ["RUNS_ROOT"] = str(args.root.resolve())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    from webapp.core.models import Project

    setup_test_environment()  # the test client's allowed host; nothing else changes
    from webapp.core.startup import freeze_startup_heap

    freeze_startup_heap()  # as a web process does once started (webapp/wsgi.py)
    viewer = get_user_model().objects.get(username="scale-viewer")
    results: dict[str, list[dict]] = {}
    for scale in args.scales.split(","):
        slug = f"scale-{scale}"
        if not Project.objects.filter(slug=slug).exists():
            print(f"{scale}: no project {slug} (run bench/make_big_run.py --scale {scale})")
            continue
        size = SCALES[scale]
        print(f"\n== {scale}: {size['steps']:,} steps x 150 metrics a run, {size['pairs']:,} preference pairs "
              f"(load {load():.1f})", flush=True)
        client = Client()
        client.force_login(viewer)
        timer = Timer(args.repeat, [w for w in args.only.split(",") if w])
        run_figures(timer, slug, client)
        if timer.wanted("review"):
            review_figures(timer, size["pairs"])
        if timer.wanted("sync") or timer.wanted("retention"):
            sync_figures(timer, slug)
        results[scale] = timer.rows
    if "small" in results and "large" in results:
        size_ratio = SCALES["large"]["steps"] / SCALES["small"]["steps"]
        print(f"\n== growth, small -> large ({size_ratio:.0f}x the steps and the pairs)")
        small = {r["label"].replace("100,000", "N").replace("1,000,000", "N"): r for r in results["small"]}
        for r in results["large"]:
            s = small.get(r["label"].replace("1,000,000", "N"))
            if s is None:
                continue
            # judged on this process's CPU time: wall time on a shared machine moves with the load
            ratio, cpu_ratio = r["p50"] / s["p50"], r["cpu"] / s["cpu"]
            print(f"  {r['label'][:52]:<52} wall {s['p50']:7.1f} -> {r['p50']:7.1f} ms (x{ratio:4.2f}), cpu "
                  f"{s['cpu']:6.1f} -> {r['cpu']:6.1f} ms (x{cpu_ratio:4.2f}), queries {s['queries']} -> "
                  f"{r['queries']}: {growth_word(cpu_ratio, size_ratio)}")
    if args.soak_minutes:
        import bench_scale_soak

        bench_scale_soak.soak(args, viewer, "large" if "large" in results else next(iter(results)))


if __name__ == "__main__":
    main()
