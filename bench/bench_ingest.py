"""Dataset ingest throughput and memory: our import service vs pandas, measured in the same run.

    .venv/bin/python bench/bench_ingest.py [--rows 100000] [--in-place] [--keep-file] [--ours-only]

Generates N preference pairs (100k ≈ 100 MB of JSON Lines) in a temporary folder, then runs two child
processes on the same file and database:
  ours      webapp.datasets.services.dataset_import (streaming parse, validation, hashes, COPY on
            PostgreSQL / bulk_create elsewhere, seeded split, duplicate and source counts)
  baseline  pandas.read_json(lines=True) + DataFrame.to_sql into a scratch table
and prints rows/s and peak RSS (getrusage(RUSAGE_SELF).ru_maxrss of each child) with their ratio, and
on PostgreSQL the CPU seconds of each side: the child's own plus its database backends' (read from
/proc while they run), which a busy machine disturbs far less than wall time.
Each runs --repeats times (default 2), interleaved; the fastest run counts, since a shared machine's
load changes from one run to the next, and the peak RSS is the highest seen.
Targets: ours at least twice the baseline's rows/s, peak RSS under 400 MB (and the same at 1M rows).
--ours-only skips the baseline, whose memory grows with the file (about 14 GB at 1M rows): for
checking that ours stays flat on big files.

The database is the configured one: PostgreSQL when DATABASE_URL is set, else SQLite. By default a
scratch database is created next to it (a new PostgreSQL database on the same server, or a temporary
SQLite file), migrated, and dropped at the end; --in-place uses the configured database as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORDS = [
    "the", "model", "answer", "should", "explain", "each", "step", "clearly", "and", "check", "the",
    "result", "before", "replying", "to", "user", "because", "reward", "functions", "score", "final",
    "numbers", "exactly", "while", "reviewers", "prefer", "short", "polite", "helpful", "responses", "that",
    "avoid", "guessing", "café", "naïve", "über", "日本", "données", "résumé",
]
TARGET_RSS_MB = 400
TARGET_SPEEDUP = 2.0


def generate(path: Path, rows: int, seed: int = 0) -> int:
    """Write `rows` preference pairs of about 1 KB each; return the file size in bytes."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(rows):
            prompt = f"Question {i}: " + " ".join(rng.choices(WORDS, k=38))
            chosen = " ".join(rng.choices(WORDS, k=70))
            rejected = " ".join(rng.choices(WORDS, k=48))
            fh.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": rejected,
                                 "data_source": f"source-{i % 7}"}, ensure_ascii=False) + "\n")
    return path.stat().st_size


# ---- child processes --------------------------------------------------------------------------------

def child_ours(path: str) -> dict:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from webapp.core.models import Project
    from webapp.datasets.services import dataset_import

    project, _ = Project.objects.get_or_create(slug="bench-ingest", defaults={"name": "Ingest benchmark"})
    name = f"bench-{os.getpid()}"
    start, cpu = time.perf_counter(), time.process_time()
    version = dataset_import(project=project, user=None, name=name, path=path, split="10%", split_seed=0)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    rows = version.row_count
    from django.db import connection

    from webapp.datasets.ingest import delete_rows

    if os.environ.get("BENCH_IN_PLACE"):
        delete_rows(version.pk)
        version.dataset.delete()
    elif connection.vendor == "postgresql":  # the next repeat starts from an empty table, as the baseline's does
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE datasets_datasetrow CASCADE")  # review tables reference rows
    else:
        delete_rows(version.pk)
    return {"seconds": seconds, "rows": rows, "cpu": cpu}


def child_baseline(path: str) -> dict:
    import pandas as pd

    url = os.environ.get("DATABASE_URL", "")
    table = f"bench_baseline_{os.getpid()}"
    start, cpu = time.perf_counter(), time.process_time()
    df = pd.read_json(path, lines=True)
    if url.startswith(("postgres://", "postgresql://")):
        from sqlalchemy import create_engine, text

        engine = create_engine("postgresql+psycopg://" + url.split("://", 1)[1])
        df.to_sql(table, engine, if_exists="replace", index=False, chunksize=10_000)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        with engine.begin() as conn:
            conn.execute(text(f'DROP TABLE "{table}"'))
    else:
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///"):] if url else ":memory:")
        df.to_sql(table, conn, if_exists="replace", index=False, chunksize=10_000)
        conn.commit()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        conn.execute(f'DROP TABLE "{table}"')
        conn.close()
    return {"seconds": seconds, "rows": len(df), "cpu": cpu}


class ServerCpu:
    """CPU seconds of the PostgreSQL backends serving one database, read from /proc while they live (a
    backend's time is gone once it exits). On a shared machine CPU time is steadier than wall time."""

    def __init__(self, db_name: str | None):
        self.db_name, self.seen, self.stop = db_name, {}, threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self.stop.is_set():
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    title = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if not title.startswith(b"postgres: ") or f" {self.db_name} ".encode() not in title:
                        continue
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                start = fields[19]  # the same pid reused later is another process
                self.seen[(pid, start)] = (int(fields[11]) + int(fields[12])) / tick
            self.stop.wait(0.05)

    def __enter__(self) -> ServerCpu:
        if self.db_name and Path("/proc").is_dir():
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    @property
    def seconds(self) -> float | None:
        return sum(self.seen.values()) if self.db_name else None


def run_child(kind: str, path: Path, env: dict) -> dict:
    url = env.get("DATABASE_URL", "")
    db_name = urlparse(url).path.lstrip("/") if url.startswith(("postgres://", "postgresql://")) else None
    with ServerCpu(db_name) as server:
        proc = subprocess.run([sys.executable, __file__, "--child", kind, "--file", str(path)], env=env, cwd=ROOT,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["server_cpu"] = server.seconds
    return result


# ---- scratch database -------------------------------------------------------------------------------

class ScratchDatabase:
    """A fresh database beside the configured one, migrated for the datasets app, dropped at exit."""

    def __init__(self, url: str, workdir: Path):
        self.url, self.workdir, self.pg_name = url, workdir, None

    def __enter__(self) -> str:
        if self.url.startswith(("postgres://", "postgresql://")):
            import psycopg

            parsed = urlparse(self.url)
            self.pg_name = f"bench_ingest_{os.getpid()}"
            self.admin = urlunparse(parsed._replace(path="/postgres"))
            with psycopg.connect(self.admin.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.pg_name}"')
            scratch = urlunparse(parsed._replace(path=f"/{self.pg_name}"))
        else:
            scratch = f"sqlite:///{self.workdir / 'bench.sqlite3'}"
        env = dict(os.environ, DATABASE_URL=scratch, WORKBENCH_VAR_DIR=str(self.workdir / "var"))
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT,
                       env=env, check=True)
        return scratch

    def __exit__(self, *exc) -> None:
        if self.pg_name:
            import psycopg

            with psycopg.connect(self.admin.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')


def _best(results: list[dict]) -> dict:
    """The fastest run's time, and the highest peak RSS of all runs (memory is not luck)."""
    fastest = min(results, key=lambda r: r["seconds"])
    leanest = min(results, key=lambda r: r["cpu"] + (r.get("server_cpu") or 0))
    return {**fastest, "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            "all_seconds": [round(r["seconds"], 2) for r in results],
            "total_cpu": leanest["cpu"] + (leanest.get("server_cpu") or 0), "client_cpu": leanest["cpu"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--in-place", action="store_true", help="use the configured database, no scratch copy")
    parser.add_argument("--keep-file", action="store_true", help="keep the generated JSONL file")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each, interleaved; the fastest counts (the machine may be shared)")
    parser.add_argument("--ours-only", action="store_true", help="skip the pandas baseline (big files)")
    parser.add_argument("--child", choices=["ours", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child_ours(args.file) if args.child == "ours" else child_baseline(args.file)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result["peak_rss_mb"] = usage.ru_maxrss / 1024
        print(json.dumps(result))
        return

    from webapp.env import envstr

    workdir = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    configured = os.environ.get("DATABASE_URL") or f"sqlite:///{workdir / 'bench.sqlite3'}"
    path = workdir / "pairs.jsonl"
    t0 = time.perf_counter()
    size = generate(path, args.rows)
    print(f"generated {args.rows:,} pairs, {size / 1e6:.1f} MB of JSONL in {time.perf_counter() - t0:.1f} s ({path})")
    engine = "PostgreSQL" if configured.startswith(("postgres://", "postgresql://")) else "SQLite"
    scratch_ctx = ScratchDatabase(configured, workdir) if not args.in_place else None
    try:
        url = scratch_ctx.__enter__() if scratch_ctx else configured
        env = dict(os.environ, DATABASE_URL=url, WORKBENCH_VAR_DIR=str(workdir / "var"),
                   DATASET_MAX_UPLOAD_MB=envstr("DATASET_MAX_UPLOAD_MB", "4096"),
                   BENCH_IN_PLACE="1" if args.in_place else "")
        print(f"database: {engine} ({'scratch ' if scratch_ctx else ''}{urlparse(url).path.lstrip('/')})")
        runs: dict[str, list[dict]] = {"ours": []} if args.ours_only else {"ours": [], "baseline": []}
        for _ in range(max(args.repeats, 1)):
            for kind in runs:
                runs[kind].append(run_child(kind, path, env))
        ours = _best(runs["ours"])
        base = _best(runs["baseline"]) if not args.ours_only else None
    finally:
        if scratch_ctx:
            scratch_ctx.__exit__(None, None, None)
        if not args.keep_file:
            shutil.rmtree(workdir, ignore_errors=True)  # the file, the scratch SQLite database and var/
    if base is None:
        assert ours["rows"] == args.rows, ours
        print(f"\nours (dataset_import): {ours['rows'] / ours['seconds']:,.0f} rows/s, peak RSS "
              f"{ours['peak_rss_mb']:.0f} MB (runs: {', '.join(map(str, ours['all_seconds']))} s); "
              f"peak RSS < {TARGET_RSS_MB} MB: {'PASS' if ours['peak_rss_mb'] < TARGET_RSS_MB else 'FAIL'}")
        return
    assert ours["rows"] == base["rows"] == args.rows, (ours, base)
    print(f"\n{'best of ' + str(len(runs['ours'])):34}{'seconds':>9}{'rows/s':>11}{'peak RSS':>12}")
    for label, r in (("ours (dataset_import)", ours), ("baseline (pandas read_json+to_sql)", base)):
        print(f"{label:34}{r['seconds']:9.2f}{r['rows'] / r['seconds']:11,.0f}{r['peak_rss_mb']:9.0f} MB"
              f"   (runs: {', '.join(map(str, r['all_seconds']))} s)")
    speed = base["seconds"] / ours["seconds"]
    memory = ours["peak_rss_mb"] / base["peak_rss_mb"]
    print(f"\nratio: ours is {speed:.2f}x the baseline's speed, with {memory:.2f}x its peak memory")
    if ours.get("server_cpu") is not None:
        print(f"CPU seconds, client + database server (lowest run; steadier than wall time on a shared machine): "
              f"ours {ours['total_cpu']:.2f} ({ours['client_cpu']:.2f} + "
              f"{ours['total_cpu'] - ours['client_cpu']:.2f}), "
              f"baseline {base['total_cpu']:.2f} ({base['client_cpu']:.2f} + "
              f"{base['total_cpu'] - base['client_cpu']:.2f}) "
              f"({base['total_cpu'] / ours['total_cpu']:.2f}x less work)")
    print(f"target {TARGET_SPEEDUP:g}x the baseline: {'PASS' if speed >= TARGET_SPEEDUP else 'FAIL'}; "
          f"peak RSS < {TARGET_RSS_MB} MB: {'PASS' if ours['peak_rss_mb'] < TARGET_RSS_MB else 'FAIL'}")


if __name__ == "__main__":
    main()
