"""Review speed on a large preference dataset in PostgreSQL (server time through the Django test client).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/review_bench \
        .venv/bin/python bench/bench_review.py [--rows 1000000] [--reviewed 0.02] [--requests 200] [--reseed]

Use a scratch database: the benchmark migrates it and writes a project "bench-review" into it. The first
run seeds a preference dataset of --rows pairs with COPY, creates the review states with the app's own
`ensure_pair_states`, and simulates two reviewers who reviewed the first --reviewed share of the pairs
(overlap 2, ~80 % agreement); later runs reuse it unless --reseed. Then it times, for a third reviewer:
the review screen's JSON endpoints (next pair = a new claim, resume, item, submit), the bulk list view
(first page, a page deep in the dataset, filtered pages) and the stats view, and prints p50/p95 of each
against the 100 ms target.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

TARGET_MS = 100.0
SLUG = "bench-review"
WORDS = ["the", "model", "answer", "step", "first", "then", "check", "value", "sum", "result", "because", "we",
         "total", "list", "proof", "case", "number", "python", "function", "return", "loop", "error", "test", "data",
         "input", "output", "reason", "simple", "clear", "so"]


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choices(WORDS, k=n_words))


def _pool(rng: random.Random) -> list[tuple[str, str, str]]:
    """997 distinct (prompt, chosen, rejected) texts; rows cycle through them with their index appended."""
    out = []
    for i in range(997):
        chosen = _text(rng, 60) + ("\n\n```python\ndef f(x):\n    return x + 1\n```" if i % 5 == 0 else "")
        out.append((_text(rng, 25) + "?", chosen, _text(rng, 50)))
    return out


def _log(msg: str) -> None:
    print(msg, flush=True)


def _wipe(version) -> None:
    """Delete a version's rows with plain SQL: the ORM's cascade would load a million objects first."""
    from django.db import connection

    tables = ["review_assignment", "review_review", "review_responseedit", "review_comment", "review_pairstate",
              "review_voteprofile", "review_pairagreement", "review_reviewerstats"]
    with connection.cursor() as cur:
        for table in tables:
            cur.execute(f"DELETE FROM {table} WHERE version_id = %s", [version.pk])
        cur.execute("DELETE FROM review_versionreviewstats WHERE version_id = %s", [version.pk])
        cur.execute("DELETE FROM datasets_datasetrow WHERE version_id = %s", [version.pk])
    version.dataset.delete()


def seed(n_rows: int, reviewed: float, reseed: bool, seed_value: int = 0):
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from webapp.core.models import Membership, Project, Role
    from webapp.datasets.models import Dataset, DatasetVersion
    from webapp.review.services import ensure_pair_states

    User = get_user_model()
    project, _ = Project.objects.get_or_create(slug=SLUG, defaults={"name": "Review benchmark"})
    project.review_overlap, project.review_blind = 2, True
    project.save()
    users = {}
    for name, role in [("bench-admin", Role.ADMIN), ("bench-eng", Role.ENGINEER), ("bench-r1", Role.REVIEWER),
                       ("bench-r2", Role.REVIEWER), ("bench-r3", Role.REVIEWER)]:
        users[name], _ = User.objects.get_or_create(username=name)
        Membership.objects.update_or_create(project=project, user=users[name], defaults={"role": role})
    name = f"bench-{n_rows}"
    existing = Dataset.objects.filter(project=project, name=name).first()
    if existing is not None:
        version = existing.versions.first()
        if not reseed and version is not None and version.status == "ready":
            _log(f"reusing {name} (version {version.pk}); --reseed to start over")
            return project, version, users
        _log(f"deleting the old {name} ...")
        t0 = time.perf_counter()
        if version is not None:
            _wipe(version)
        else:
            existing.delete()
        _log(f"  deleted in {time.perf_counter() - t0:.1f} s")

    rng = random.Random(seed_value)
    pool = _pool(rng)
    dataset = Dataset.objects.create(project=project, name=name, kind="preference")
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status="importing")
    columns = ("version_id, index, source_line, split, data_source, ability, prompt, chosen, rejected, ground_truth, "
               "extra_info, prompt_text, chosen_text, rejected_text, prompt_chars, chosen_chars, rejected_chars, "
               "row_hash")
    sources = ["math", "code", "chat", "safety"]
    t0 = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cur:
        with cur.cursor.copy(f"COPY datasets_datasetrow ({columns}) FROM STDIN") as copy:
            for i in range(n_rows):
                prompt, chosen, rejected = pool[i % len(pool)]
                prompt = f"{prompt} (#{i})"
                copy.write_row((version.pk, i, i + 1, "val" if i % 20 == 0 else "train", sources[i % 4], "",
                                json.dumps(prompt), json.dumps(chosen), json.dumps(rejected), "", "{}", prompt,
                                chosen, rejected, len(prompt), len(chosen), len(rejected), f"{i:064x}"))
        cur.execute("ANALYZE datasets_datasetrow")
    DatasetVersion.objects.filter(pk=version.pk).update(status="ready", row_count=n_rows,
                                                        train_count=n_rows - (n_rows + 19) // 20,
                                                        val_count=(n_rows + 19) // 20)
    version.refresh_from_db()
    _log(f"COPY of {n_rows:,} rows: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    ensure_pair_states(version=version)
    _log(f"ensure_pair_states (INSERT ... SELECT): {time.perf_counter() - t0:.1f} s")
    _simulate_reviews(version, users["bench-r1"], users["bench-r2"], int(n_rows * reviewed), rng)
    return project, version, users


def _simulate_reviews(version, r1, r2, m: int, rng: random.Random) -> None:
    """Reviews of the first m pairs by two reviewers, loaded in bulk, then the counters rebuilt from them."""
    from django.db import connection, transaction
    from django.utils import timezone

    from webapp.review import tally
    from webapp.review.counters import counters_rebuild
    from webapp.review.services import orientation

    t0 = time.perf_counter()
    labels_pool = ["approve"] * 12 + ["swap"] * 4 + ["reject"] * 3 + ["flag"]
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT id, index FROM datasets_datasetrow WHERE version_id = %s AND index < %s ORDER BY index",
                    [version.pk, m])
        rows = cur.fetchall()
        states = []
        with cur.cursor.copy("COPY review_assignment (reviewer_id, row_id, version_id, row_index, left_is_chosen, "
                             "done, claimed_at, done_at) FROM STDIN") as copy:
            for row_id, index in rows:
                for user in (r1, r2):
                    copy.write_row((user.pk, row_id, version.pk, index,
                                    orientation(row_id=row_id, reviewer_id=user.pk), True, now, now))
        with cur.cursor.copy("COPY review_review (reviewer_id, row_id, version_id, decision, swap, reason, label, "
                             "left_is_chosen, choice, time_ms, created_at, updated_at) FROM STDIN") as copy:
            for row_id, _index in rows:
                a = rng.choice(labels_pool)
                b = a if rng.random() < 0.8 else rng.choice([x for x in tally.LABELS if x != a])
                for user, label in ((r1, a), (r2, b)):
                    decision = "approve" if label in ("approve", "swap") else label
                    copy.write_row((user.pk, row_id, version.pk, decision, label == "swap",
                                    "unclear" if label == "flag" else "", label,
                                    orientation(row_id=row_id, reviewer_id=user.pk), "", rng.randint(2000, 60000),
                                    now, now))
                state, final_label, source = tally.derive_state(labels=[a, b], overlap=2)
                votes = tally.votes_of([a, b])
                states.append((row_id, state, final_label, final_label == "swap", source, *votes, a != b))
        cur.execute("CREATE TEMP TABLE bench_states (row_id bigint, state text, final_label text, final_swap bool, "
                    "source text, va int, vs int, vr int, vf int, disagreement bool) ON COMMIT DROP")
        with cur.cursor.copy("COPY bench_states FROM STDIN") as copy:
            for s in states:
                copy.write_row(s)
        cur.execute("UPDATE review_pairstate p SET state = s.state, final_label = s.final_label, "
                    "final_swap = s.final_swap, decision_source = s.source, claims = 2, review_count = 2, "
                    "votes_approve = s.va, votes_swap = s.vs, votes_reject = s.vr, votes_flag = s.vf, "
                    "disagreement = s.disagreement FROM bench_states s WHERE p.row_id = s.row_id")
        for table in ("review_pairstate", "review_assignment", "review_review"):
            cur.execute(f"ANALYZE {table}")
    _log(f"{m:,} pairs reviewed by 2 reviewers, loaded: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    stats = counters_rebuild(version=version)
    _log(f"counters_rebuild: {time.perf_counter() - t0:.1f} s ({stats.decided:,} decided, "
         f"{stats.n_conflict:,} conflicts)")


def _time(fn, n: int, warmup: int = 3) -> dict:
    """Wall time and this process's CPU time per call (ms), and the SQL queries of one call."""
    from django.db import connection

    for _ in range(warmup):
        fn()
    executed = []

    def count(execute, sql, params, many, context):
        executed.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        fn()
    wall, cpu = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return {"wall": wall, "cpu": cpu, "queries": len(executed)}


def _check(resp, expected: int = 200):
    if resp.status_code != expected:
        raise SystemExit(f"{resp.request['PATH_INFO']} answered {resp.status_code}: {resp.content[:300]!r}")
    return resp


def measure(project, version, users, n: int) -> list[tuple[str, list[float]]]:
    from django.test import Client

    from webapp.datasets.models import DatasetRow

    reviewer, engineer = Client(), Client()
    reviewer.force_login(users["bench-r3"])
    engineer.force_login(users["bench-eng"])
    api = f"/api/projects/{SLUG}/review/versions/{version.pk}/"
    pages = f"/p/{SLUG}/review/v/{version.pk}/"
    results = []
    cursor = {"after": None}

    def next_claim():
        url = api + "next/" + (f"?after={cursor['after']}" if cursor["after"] is not None else "")
        item = _check(reviewer.get(url)).json()["item"]
        cursor["after"] = item["index"]
        cursor["row"] = item["row_id"]

    results.append(("API next pair (claims a new pair)", _time(next_claim, n)))
    results.append(("API next pair (resume first open)", _time(lambda: _check(reviewer.get(api + "next/")), n)))
    results.append(("API item detail", _time(lambda: _check(reviewer.get(api + f"items/{cursor['row']}/")), n)))
    open_rows = list(DatasetRow.objects.filter(version=version, review_assignments__reviewer=users["bench-r3"],
                                               reviews__isnull=True).order_by("index").values_list("pk", flat=True))
    choices = iter(open_rows)

    def submit():
        row = next(choices)
        _check(reviewer.post(api + f"items/{row}/review/", {"choice": "left", "time_ms": 5000},
                             content_type="application/json"), 201)

    results.append(("API submit a decision", _time(submit, min(n, len(open_rows) - 4))))
    deep = version.row_count // 2
    results.append(("list view, first page", _time(lambda: _check(engineer.get(pages + "pairs/")), n // 2)))
    results.append((f"list view, page after row {deep:,}",
                    _time(lambda: _check(engineer.get(pages + f"pairs/?after={deep}")), n // 2)))
    results.append(("list view, state=conflict", _time(lambda: _check(engineer.get(pages + "pairs/?state=conflict")),
                                                       n // 2)))
    results.append(("list view, source=code", _time(lambda: _check(engineer.get(pages + "pairs/?data_source=code")),
                                                    n // 2)))
    results.append(("stats view (HTML)", _time(lambda: _check(engineer.get(pages + "stats/")), n // 2)))
    results.append(("stats API (JSON)", _time(lambda: _check(engineer.get(api + "stats/")), n // 2)))
    results.append(("conflicts view", _time(lambda: _check(engineer.get(pages + "conflicts/")), n // 2)))
    return results


def explain(version, users) -> None:
    """PostgreSQL's own execution time of the hot queries (EXPLAIN ANALYZE): independent of Python."""
    import re

    from webapp.review.models import Assignment, PairState, VoteProfile
    from webapp.review.selectors import PairFilter, pairs_queryset

    cursor = (Assignment.objects.filter(reviewer=users["bench-r3"], version=version).order_by("-row_index")
              .values_list("row_index", flat=True).first()) or 0
    queries = {
        "claim seek (claims=0, after cursor)": PairState.objects.filter(
            version_id=version.pk, state="unreviewed", claims=0, row_index__gt=cursor).order_by("row_index")[:1],
        "claim seek (claims=1, none left)": PairState.objects.filter(
            version_id=version.pk, state="unreviewed", claims=1, row_index__gt=cursor).order_by("row_index")[:1],
        "reviewer cursor (max own row)": Assignment.objects.filter(
            reviewer=users["bench-r3"], version=version).order_by("-row_index")[:1],
        "list page deep (keyset)": pairs_queryset(version=version, f=PairFilter()).filter(
            row_index__gt=version.row_count // 2).select_related("row").order_by("row_index")[:51],
        "list state=conflict": pairs_queryset(version=version, f=PairFilter(state="conflict")).select_related(
            "row").order_by("row_index")[:51],
        "vote profiles (stats)": VoteProfile.objects.filter(version=version, count__gt=0),
    }
    _log("\nPostgreSQL execution time (EXPLAIN ANALYZE):")
    for name, qs in queries.items():
        plan = qs.explain(analyze=True)
        ms = re.search(r"Execution Time: ([0-9.]+) ms", plan)
        first = plan.splitlines()[0].strip()[:90]
        _log(f"  {name:40s} {float(ms.group(1)) if ms else float('nan'):7.2f} ms   {first}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="pairs in the dataset (default 1,000,000)")
    parser.add_argument("--reviewed", type=float, default=0.02, help="share of pairs already reviewed twice")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per endpoint")
    parser.add_argument("--reseed", action="store_true", help="delete and seed the dataset again")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        raise SystemExit("Set DATABASE_URL to a scratch PostgreSQL database, e.g. "
                         "postgres://postgres@127.0.0.1:5432/review_bench (create it with createdb).")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.DEBUG = False  # no query log: measure what production does
    call_command("migrate", verbosity=0)
    project, version, users = seed(args.rows, args.reviewed, args.reseed)
    _log(f"\ntiming {args.requests} requests per endpoint on {version.row_count:,} pairs "
         f"(server time through the Django test client, PostgreSQL)")
    results = measure(project, version, users, args.requests)
    _log(f"\n{'endpoint':40s} {'p50 ms':>7s} {'p95 ms':>7s} {'cpu p50':>8s} {'queries':>8s}   "
         f"target p95 < {TARGET_MS:.0f} ms")
    load = os.getloadavg()
    for name, r in results:
        times = r["wall"]
        p50 = statistics.median(times)
        p95 = statistics.quantiles(times, n=20)[-1] if len(times) >= 20 else max(times)
        _log(f"{name:40s} {p50:7.1f} {p95:7.1f} {statistics.median(r['cpu']):8.1f} {r['queries']:8d}   "
             f"{'ok' if p95 < TARGET_MS else 'SLOW'}")
    explain(version, users)
    _log(f"(load average during the timing: {load[0]:.1f} on {os.cpu_count()} CPUs; PostgreSQL runs on the same "
         f"machine, so a busy machine inflates every figure)")


if __name__ == "__main__":
    main()
