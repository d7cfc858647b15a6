"""Generate the volume of real long runs in a scratch PostgreSQL database (for bench/bench_scale.py).

    .venv/bin/python bench/make_big_run.py --scale large     # 20,000-step runs, 1M preference pairs
    .venv/bin/python bench/make_big_run.py --scale small     # 2,000-step runs, 100k pairs (for growth)

Options: --db (default postgres://postgres@127.0.0.1:5432/workbench_scale; created when missing, refused when
it is the app's or a test database), --root (the runs folder, default var/scale/runs), --reseed.

Each scale is its own project, `scale-<scale>`: 200 runs, of which 5 are "7B-scale" (N steps x 150 metrics
with their min/max rollups, 20 attempts, a guard history, 200 checkpoints as sparse files of a 7B GRPO
checkpoint's real size (bf16 weights + fp32 Adam states, ~98 GB apparent, nothing on disk), an evaluation of
every tenth checkpoint, and a rollout store at its 512 MB cap of 64 prompts x 8 samples a step with 1,024-token
responses and per-token log-ratios). The 195 others are demo-sized (300 steps x 10 metrics, 3 checkpoints).
The preference pairs are bench_review's dataset (COPY, review states, two reviewers over 2 %).
The five big runs' rollout stores are hard links of one store (the same steps, so the same files).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/workbench_scale"
SCALES = {"small": {"steps": 2_000, "pairs": 100_000}, "large": {"steps": 20_000, "pairs": 1_000_000}}
RUNS, BIG, METRICS, SMALL_STEPS, SMALL_METRICS = 200, 5, 150, 300, 10
PROMPTS, GROUP, TOKENS, PROMPT_SET = 64, 8, 1024, 256
CHECKPOINTS, ATTEMPTS = 200, 20
WEIGHTS_BYTES, OPTIM_BYTES = 7_000_000_000 * 2, 7_000_000_000 * 12  # bf16 weights; fp32 master + Adam m, v
ROLLOUT_CAP_MB = 512.0
WORDS = ["the", "so", "we", "sum", "then", "check", "x", "=", "+", "1", "2", "answer", "step", "is", "of", "and"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def setup(db_url: str, runs_root: Path) -> None:
    name = urlparse(db_url).path.lstrip("/")
    if not name or name in ("workbench", "postgres") or name.startswith("test"):
        raise SystemExit(f"refusing database {name!r}: use a scratch database (default workbench_scale)")
    import psycopg

    admin = db_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
            log(f"created database {name}")
    os.environ["DATABASE_URL"] = db_url
    os.environ["RUNS_ROOT"] = str(runs_root)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def metric_names(n: int) -> list[str]:
    base = ["critic/score/mean", "critic/score/min", "critic/score/max", "actor/kl_loss", "actor/entropy",
            "actor/pg_loss", "actor/grad_norm", "actor/lr", "response_length/mean", "response_length/clip_ratio"]
    return (base + [f"perf/extra_{i:03d}" for i in range(n - len(base))])[:n]


def copy_metrics(cur, job_id: int, steps: int, names: list[str], seed: int, rollups: list[str] | None = None) -> int:
    """COPY steps x names points (a random walk each, one spike per series); with `rollups`, their min/max
    pyramid's rows are appended to it (the app's rollup definition, computed from the same arrays)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    step_col = np.arange(1, steps + 1)
    times = 1.7e9 + step_col * 9.0
    attempts = np.minimum(step_col * ATTEMPTS // (steps + 1), ATTEMPTS - 1) + 1
    total = 0
    with cur.cursor.copy("COPY runs_metricpoint (job_id, step, name, value, wall_time, attempt) FROM STDIN") as cp:
        for k, name in enumerate(names):
            values = np.cumsum(rng.normal(0, 0.01, steps)) + k % 7
            values[(k * 7919) % steps] += 25.0
            buf = io.StringIO()
            for s, v, t, a in zip(step_col.tolist(), values.tolist(), times.tolist(), attempts.tolist(), strict=True):
                buf.write(f"{job_id}\t{s}\t{name}\t{v!r}\t{t!r}\t{a}\n")
            cp.write(buf.getvalue())
            total += steps
            if rollups is not None:
                rollups.extend(rollup_lines(job_id, name, step_col, values, times))
    return total


def rollup_lines(job_id: int, name: str, steps, values, times) -> list[str]:
    """Every level's buckets of one series: the first point holding the minimum and the first holding the
    maximum (what webapp.monitoring.rollup.rollup_update writes, level by level)."""
    import numpy as np

    from webapp.monitoring.downsample import first_per_segment
    from webapp.monitoring.rollup import LEVELS, size

    out = []
    s_, v_, t_ = steps.tolist(), values.tolist(), times.tolist()
    for level in LEVELS:
        buckets = steps // size(level)
        starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
        seg = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(steps)]))
        lo = first_per_segment(values == np.minimum.reduceat(values, starts)[seg], seg)
        hi = first_per_segment(values == np.maximum.reduceat(values, starts)[seg], seg)
        for b, i, j in zip(buckets[starts].tolist(), lo.tolist(), hi.tolist(), strict=True):
            out.append(f"{job_id}\t{name}\t{level}\t{b}\t{s_[i]}\t{v_[i]!r}\t{t_[i]!r}\t{s_[j]}\t{v_[j]!r}\t"
                       f"{t_[j]!r}\n")
    return out


class BulkLoad:
    """Drop a table's secondary indexes and unique constraints and pause its triggers (foreign-key checks) for a
    bulk COPY, and build them again after: one sort instead of millions of index insertions."""

    def __init__(self, cur, table: str):
        self.cur, self.table = cur, table

    def __enter__(self):
        cur, t = self.cur, self.table
        cur.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
                    "AND contype = 'u'", [t])
        self.constraints = cur.fetchall()
        cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN "
                    "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)", [t, t])
        self.indexes = cur.fetchall()
        for name, _ in self.constraints:
            cur.execute(f'ALTER TABLE {t} DROP CONSTRAINT "{name}"')
        for name, _ in self.indexes:
            cur.execute(f'DROP INDEX "{name}"')
        cur.execute(f"ALTER TABLE {t} DISABLE TRIGGER ALL")
        return self

    def __exit__(self, *exc):
        cur, t = self.cur, self.table
        cur.execute(f"ALTER TABLE {t} ENABLE TRIGGER ALL")
        cur.execute("SET maintenance_work_mem = '512MB'")
        for name, definition in self.constraints:
            cur.execute(f'ALTER TABLE {t} ADD CONSTRAINT "{name}" {definition}')
        for _name, definition in self.indexes:
            cur.execute(definition)
        return False


_POOL: list[tuple[list[str], list[float]]] = []


def rollout_row(rng: random.Random, step: int, prompt: int, i: int) -> dict:
    if not _POOL:  # 256 distinct responses, reused: generating 1,024 random tokens per sample is the slow part
        r = random.Random(7)
        _POOL.extend(([r.choice(WORDS) for _ in range(TOKENS)], [round(r.gauss(0, 0.1), 4) for _ in range(TOKENS)])
                     for _ in range(256))
    toks, ratios = _POOL[rng.randrange(len(_POOL))]
    return {"input": f"Problem {prompt}: what is {prompt} + {prompt * 3}? Think step by step. " + "x " * 100,
            "output": " ".join(toks), "gts": str(prompt * 4), "score": rng.random(), "step": step,
            "uid": f"{step}:{prompt}", "sample_index": i, "components": {"exact": rng.random(), "format": 1.0},
            "errors": {}, "extras": {}, "advantage": rng.gauss(0, 1), "response_length": TOKENS,
            "truncated": rng.random() < 0.1, "tokens": toks,
            "token_logratio": ratios}


def write_rollout_store(run_dir: Path, last_step: int) -> list[int]:
    """The newest steps' dumps (64 prompts x 8 samples) until the store reaches its cap, as retention leaves it,
    each with the summary a trainer writes beside it."""
    from training import rollouts
    from training.ingest import write_rollout_summary

    folder = run_dir / "samples" / "rollout"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    used, written, step = 0, [], last_step
    while used < ROLLOUT_CAP_MB * 1024 * 1024 and step > 0:
        rows = [rollout_row(rng, step, p, i) for p in rng.sample(range(PROMPT_SET), PROMPTS) for i in range(GROUP)]
        used += rollouts.write_step(run_dir, step, rows).stat().st_size
        write_rollout_summary(run_dir, step)
        written.append(step)
        step -= 1
    return sorted(written)


def link_store(src: Path, dst: Path) -> None:
    (dst / "samples" / "rollout").mkdir(parents=True, exist_ok=True)
    for f in (src / "samples" / "rollout").glob("*.json*"):  # the dumps and their summaries
        target = dst / "samples" / "rollout" / f.name
        if not target.exists():
            os.link(f, target)


def sparse_checkpoint(folder: Path, step: int, attempt: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for name, size in (("model.safetensors", WEIGHTS_BYTES), ("optim_states.pt", OPTIM_BYTES)):
        with (folder / name).open("wb") as fh:
            fh.truncate(size)  # a hole: the real size, no blocks
    (folder / "manifest.json").write_text(json.dumps({"format": "local", "step": step, "attempt": attempt,
                                                      "metrics": {"critic/score/mean": 0.5}}))
    return WEIGHTS_BYTES + OPTIM_BYTES


def load_metrics(jobs: list, steps: int) -> None:
    """The big runs' points and their rollups, COPYed with the tables' indexes built once afterwards."""
    from django.db import connection, transaction

    t = time.perf_counter()
    rollups: list[str] = []
    names = metric_names(METRICS)
    with transaction.atomic(), connection.cursor() as cur:
        with BulkLoad(cur, "runs_metricpoint"):
            n = sum(copy_metrics(cur, job.pk, steps, names, b, rollups) for b, job in enumerate(jobs))
            log(f"  COPY {n:,} metric points in {time.perf_counter() - t:.1f} s; rebuilding the indexes ...")
        log(f"  points and indexes in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        with BulkLoad(cur, "monitoring_metricrollup"), cur.cursor.copy(
                "COPY monitoring_metricrollup (job_id, name, level, bucket, min_step, min_value, min_time, max_step, "
                "max_value, max_time) FROM STDIN") as cp:
            for i in range(0, len(rollups), 100_000):
                cp.write("".join(rollups[i:i + 100_000]))
        with cur.cursor.copy("COPY monitoring_metricrollupstate (job_id, name, through_step) FROM STDIN") as cp:
            for job in jobs:
                for name in names:
                    cp.write_row((job.pk, name, steps))
    log(f"  {len(rollups):,} rollup rows in {time.perf_counter() - t:.1f} s")


def make_big(job, steps: int, seed: int, store_src: Path | None) -> Path:
    from django.utils import timezone

    from webapp.monitoring.models import CheckpointEvaluation, GuardRulesRecord
    from webapp.runs.models import Checkpoint, JobAttempt, RunEvent

    run_dir = Path(job.run_dir)
    now = timezone.now()
    JobAttempt.objects.bulk_create([
        JobAttempt(job=job, number=a, reason="start" if a == 1 else ("guard_rule" if a % 3 == 0 else "resume"),
                   state="succeeded" if a == ATTEMPTS else "failed", ended_at=now, returncode=0 if a == ATTEMPTS else 1,
                   ingest={"max_step": steps * a // ATTEMPTS}) for a in range(1, ATTEMPTS + 1)])
    every = max(1, steps // CHECKPOINTS)
    ckpts = []
    for k in range(1, CHECKPOINTS + 1):
        step = k * every
        attempt = min(step * ATTEMPTS // (steps + 1), ATTEMPTS - 1) + 1
        folder = run_dir / "checkpoints" / f"global_step_{step}"
        size = sparse_checkpoint(folder, step, attempt)
        ckpts.append(Checkpoint(job=job, step=step, path=str(folder.resolve()), size_bytes=size,
                                metrics={"critic/score/mean": 0.4 + k / 1000, "actor/kl_loss": 0.01 * k}))
    ckpts = Checkpoint.objects.bulk_create(ckpts)
    CheckpointEvaluation.objects.bulk_create([
        CheckpointEvaluation(checkpoint=c, status="succeeded", win_rate=0.5 + i / 1000, win_rate_lo=0.45,
                             win_rate_hi=0.6, n=256, result={"by_source": {"math": 0.5}})
        for i, c in enumerate(ckpts) if i % 10 == 9])
    events = [RunEvent(job=job, kind="checkpoint", step=c.step, message=f"checkpoint at step {c.step}",
                       data={"checkpoint": c.pk}) for c in ckpts]
    events += [RunEvent(job=job, kind="guard", step=steps * a // ATTEMPTS,
                        message=f"KL guard tripped at step {steps * a // ATTEMPTS}: restored the last good checkpoint",
                        data={"rule": "kl", "value": 0.3, "threshold": 0.1}) for a in range(3, ATTEMPTS, 3)]
    RunEvent.objects.bulk_create(events)
    GuardRulesRecord.objects.create(job=job, trips=len(range(3, ATTEMPTS, 3)),
                                    state={"kl": {"trips": 6, "last_good_step": steps - every}})
    t = time.perf_counter()
    if store_src is None:
        written = write_rollout_store(run_dir, steps)
        log(f"  job {job.pk}: rollout store of {len(written)} steps in {time.perf_counter() - t:.1f} s")
    else:
        link_store(store_src, run_dir)
    return run_dir


def make_small_runs(project, user, runs_root: Path, count: int) -> None:
    from django.db import connection, transaction

    from webapp.runs.models import Checkpoint, Job

    jobs = Job.objects.bulk_create([
        Job(project=project, name=f"sweep-{i:03d}", kind="grpo", backend="local", state="succeeded",
            config={"hp": {"lr": 1e-6 * (1 + i % 5), "kl_coef": 0.001, "keep_last_k": 3}}, last_step=SMALL_STEPS,
            created_by=user, run_dir=str(runs_root / f"small-{project.slug}-{i}")) for i in range(count)])
    with transaction.atomic(), connection.cursor() as cur:
        for i, job in enumerate(jobs):
            copy_metrics(cur, job.pk, SMALL_STEPS, metric_names(SMALL_METRICS), 1000 + i)
    Checkpoint.objects.bulk_create([Checkpoint(job=j, step=s, path=f"{j.run_dir}/checkpoints/global_step_{s}",
                                               size_bytes=10_000_000, status="deleted" if s < 300 else "available")
                                    for j in jobs for s in (100, 200, 300)])


def generate(scale: str, runs_root: Path, reseed: bool) -> None:
    import bench_review
    from django.contrib.auth import get_user_model
    from django.db import connection

    from webapp.core.models import Membership, Project, Role
    from webapp.runs.models import Job

    size = SCALES[scale]
    slug = f"scale-{scale}"
    old = Project.objects.filter(slug=slug).first()
    if old is not None and not reseed:
        log(f"project {slug} exists; --reseed to build it again")
    else:
        if old is not None:
            log(f"deleting project {slug} ...")
            with connection.cursor() as cur:  # the ORM's cascade would load millions of points first
                ids = list(Job.objects.filter(project=old).values_list("pk", flat=True))
                for table in ("runs_metricpoint", "monitoring_metricrollup", "monitoring_metricrollupstate"):
                    cur.execute(f"DELETE FROM {table} WHERE job_id = ANY(%s)", [ids])
            old.delete()
        User = get_user_model()
        user, _ = User.objects.get_or_create(username="scale-viewer")
        user.set_password("scale-viewer-pw")
        user.save()
        project = Project.objects.create(slug=slug, name=f"Scale ({scale})")
        Membership.objects.create(project=project, user=user, role=Role.ENGINEER)
        t0 = time.perf_counter()
        store_src, big = None, []
        for b in range(BIG):
            run_dir = runs_root / f"{slug}-big-{b}"
            job = Job.objects.create(project=project, name=f"7b-grpo-{b}", kind="grpo", backend="verl",
                                     state="running" if b == 0 else "succeeded", created_by=user,
                                     config={"hp": {"lr": 1e-6 * (b + 1), "kl_coef": 0.001, "keep_last_k": CHECKPOINTS,
                                                    "rollout_n": GROUP, "train_batch_size": PROMPTS}},
                                     last_step=size["steps"], attempt_count=ATTEMPTS, run_dir=str(run_dir))
            log(f"big run {b + 1}/{BIG} (job {job.pk}) ...")
            made = make_big(job, size["steps"], b, store_src)
            store_src = store_src or made
            big.append(job)
        log(f"metric points of the {BIG} big runs ...")
        load_metrics(big, size["steps"])
        log(f"{BIG} big runs in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        make_small_runs(project, user, runs_root, RUNS - BIG)
        log(f"{RUNS - BIG} demo-sized runs in {time.perf_counter() - t0:.1f} s")
        with connection.cursor() as cur:
            for table in ("runs_metricpoint", "monitoring_metricrollup", "runs_checkpoint", "runs_runevent"):
                cur.execute(f"ANALYZE {table}")
    log(f"preference pairs: {size['pairs']:,} ...")
    bench_review.seed(size["pairs"], 0.02, reseed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=sorted(SCALES), default="large")
    ap.add_argument("--db", default=os.environ.get("SCALE_DATABASE_URL", DEFAULT_DB))
    ap.add_argument("--root", type=Path, default=ROOT / "var" / "scale" / "runs")
    ap.add_argument("--reseed", action="store_true", help="delete this scale's project and build it again")
    args = ap.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    setup(args.db, args.root.resolve())
    t0 = time.perf_counter()
    generate(args.scale, args.root.resolve(), args.reseed)
    log(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
