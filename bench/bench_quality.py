"""Dataset quality report and cleaning on a big version: time and peak memory.

    .venv/bin/python bench/bench_quality.py [--rows 100000] [--eval-rows 500]

Generates N preference pairs with bench_ingest.py's generator, imports them and an evaluation set (the
prompts of every 200th generated row, so contamination has rows to find) into a scratch database
(SQLite, or a new PostgreSQL database when DATABASE_URL points at one), then in a fresh child process
computes the quality report (webapp.datasets.quality_service.report_compute_now: task types, languages,
exact and near-duplicates, identical pairs, 13-gram contamination, length bias) and cleans the version by
it (webapp.datasets.cleaning.clean_version). Prints seconds and the child's peak RSS for each; the
report's peak should stay far below the import's 400 MB budget. CPU seconds are printed beside the wall
clock: on a shared machine they tell more (the report runs on one core).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _django():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def child_import(pairs: str, evals: str) -> dict:
    _django()
    from webapp.core.models import Project
    from webapp.datasets.services import dataset_import

    project, _ = Project.objects.get_or_create(slug="bench-quality", defaults={"name": "Quality benchmark"})
    start = time.perf_counter()
    version = dataset_import(project=project, user=None, name="pairs", path=pairs)
    seconds = time.perf_counter() - start
    evalset = dataset_import(project=project, user=None, name="evalset", path=evals, kind="prompts")
    return {"seconds": seconds, "rows": version.row_count, "eval_rows": evalset.row_count}


def child_report() -> dict:
    _django()
    from webapp.core.models import Project
    from webapp.datasets import cleaning, quality_service, selectors

    project = Project.objects.get(slug="bench-quality")
    version = selectors.version_get(project=project, dataset_id="pairs", number=1)
    evalset = selectors.version_get(project=project, dataset_id="evalset", number=1)
    start, cpu = time.perf_counter(), time.process_time()
    report = quality_service.report_compute_now(version=version, user=None, eval_versions=[evalset])
    report_seconds, report_cpu = time.perf_counter() - start, time.process_time() - cpu
    assert report.status == "ready", report.error
    cached_start = time.perf_counter()
    again = quality_service.report_compute_now(version=version, user=None, eval_versions=[evalset])
    cached_seconds = time.perf_counter() - cached_start
    assert again.pk == report.pk
    report_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start, cpu = time.perf_counter(), time.process_time()
    new = cleaning.clean_version(report=report, user=None,
                                 categories=[k for k, v in report.result["cleaning"].items() if v["rows"]])
    clean_seconds, clean_cpu = time.perf_counter() - start, time.process_time() - cpu
    s = report.result["sections"]
    return {"report_seconds": report_seconds, "report_cpu": report_cpu, "cached_seconds": cached_seconds,
            "report_peak_rss_mb": report_rss, "clean_cpu": clean_cpu,
            "clean_seconds": clean_seconds, "kept": new.row_count, "dropped": new.lineage["rows_dropped"],
            "contaminated": s["contamination"]["rows"], "near_clusters": s["duplicates"]["near"]["clusters"],
            "exact_groups": s["duplicates"]["exact"]["groups"], "languages": s["languages"]["counts"],
            "task_types": s["task_types"]["counts"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(args: list[str], env: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"child {args[0]} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child_import(*args.child[1:]) if args.child[0] == "import" else child_report()
        print(json.dumps(result))
        return

    from bench_ingest import ScratchDatabase, generate

    workdir = Path(tempfile.mkdtemp(prefix="bench-quality-"))
    pairs, evals = workdir / "pairs.jsonl", workdir / "eval.jsonl"
    generate(pairs, args.rows)
    with pairs.open() as src, evals.open("w") as out:
        for i, line in enumerate(src):
            if i % 200 == 0:
                out.write(json.dumps({"prompt": json.loads(line)["prompt"], "ground_truth": "x"}) + "\n")
    configured = os.environ.get("DATABASE_URL") or f"sqlite:///{workdir / 'bench.sqlite3'}"
    with ScratchDatabase(configured, workdir) as url:
        env = dict(os.environ, DATABASE_URL=url, WORKBENCH_VAR_DIR=str(workdir / "var"),
                   DATASET_MAX_UPLOAD_MB="4096")
        imported = run_child(["import", str(pairs), str(evals)], env)
        result = run_child(["report"], env)
    pairs.unlink(missing_ok=True)
    engine = "PostgreSQL" if configured.startswith("postgres") else "SQLite"
    print(f"{imported['rows']:,} pairs ({engine}), evaluation set of {imported['eval_rows']:,} prompts; "
          f"import {imported['seconds']:.1f} s")
    print(f"quality report: {result['report_seconds']:.1f} s wall, {result['report_cpu']:.1f} s CPU "
          f"({imported['rows'] / result['report_seconds']:,.0f} rows/s wall), peak RSS "
          f"{result['report_peak_rss_mb']:.0f} MB; cached read {result['cached_seconds'] * 1000:.0f} ms")
    print(f"  found: {result['contaminated']:,} contaminated rows, {result['near_clusters']:,} near-duplicate "
          f"clusters, {result['exact_groups']:,} exact-duplicate groups; task types {result['task_types']}; "
          f"languages {result['languages']}")
    print(f"cleaning into a new version: {result['clean_seconds']:.1f} s wall, {result['clean_cpu']:.1f} s CPU "
          f"({result['kept']:,} kept, "
          f"{result['dropped']:,} dropped); peak RSS {result['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
