"""The stored counters of the review (per version, per reviewer, vote profiles, reviewer-pair tables).

Services add differences computed by webapp.review.tally; `counters_rebuild` recomputes them all from
the reviews, to repair them or to set them up after a bulk load.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping

from django.db import connection, transaction
from django.db.models import Count, F, Q, Sum

from webapp.datasets.models import DatasetVersion
from webapp.review import tally
from webapp.review.models import (
    Assignment,
    Comment,
    PairAgreement,
    PairState,
    ResponseEdit,
    Review,
    ReviewerStats,
    State,
    VersionReviewStats,
    VoteProfile,
)


def counter_upsert(model, rows: list[tuple[dict, dict]], gate: str = "") -> tuple[str, list]:
    """One INSERT ... ON CONFLICT DO UPDATE (PostgreSQL and SQLite) adding each row's increments to the counter
    row matching its lookup, created at them when missing. Every lookup names the same fields, those of one
    of the model's unique constraints. `gate` (PostgreSQL): a condition the statement waits on (see below)."""
    q = connection.ops.quote_name
    table = q(model._meta.db_table)
    fields = [f for f in model._meta.concrete_fields if not f.auto_created]
    keys = [model._meta.get_field(k).column for k in rows[0][0]]
    added = sorted({model._meta.get_field(k).column for _, inc in rows for k in inc})
    params: list = []
    for lookup, inc in rows:
        by_column = {model._meta.get_field(k).column: v for k, v in {**lookup, **inc}.items()}
        params += [by_column.get(f.column, f.get_default()) for f in fields]
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    columns = ", ".join(q(f.column) for f in fields)
    source = (f"VALUES {', '.join([one] * len(rows))}" if not gate else
              f"SELECT * FROM (VALUES {', '.join([one] * len(rows))}) AS v WHERE {gate}")
    sets = ", ".join(f"{q(c)} = {table}.{q(c)} + EXCLUDED.{q(c)}" for c in added)
    return (f"INSERT INTO {table} ({columns}) {source} ON CONFLICT ({', '.join(q(k) for k in keys)}) "
            f"DO UPDATE SET {sets}"), params


def bump(model, lookup: dict, **increments: int) -> None:
    """Add to counter columns of the row matching `lookup`, creating it on first use (one statement)."""
    increments = {k: v for k, v in increments.items() if v}
    if increments:
        sql, params = counter_upsert(model, [(lookup, increments)])
        with connection.cursor() as cur:
            cur.execute(sql, params)


def apply_delta(version_id: int, delta: Mapping[Hashable, int], *,
                reviewer_work: Mapping[int, Mapping[str, int]] | None = None, reviews: int = 0,
                also: list[tuple[str, list]] = ()) -> tuple[dict[str, int], set[int]]:
    """Add a tally delta (contribution(new) - contribution(old)) and work counts to the stored counters.

    Rows are updated in one fixed order (profiles, reviewer pairs, reviewers by id, then the version)
    so two concurrent decisions never wait on each other's locks in a cycle: one upsert a table (one
    statement in all on PostgreSQL, each part waiting on the one before it). `also`: writes of the same change
    to rows no other transaction can be waiting for (the caller's locked rows, new rows), sent first, and on
    PostgreSQL in the same statement. Returns what it added to the version's counters ({field: increment}) and the
    reviewers whose counter rows it wrote.
    """
    state_updates: dict[str, int] = {}
    profiles: dict[tuple, int] = {}
    pairs: dict[tuple, int] = {}
    reviewer_updates: dict[int, dict[str, int]] = defaultdict(dict)
    for reviewer_id, work in (reviewer_work or {}).items():
        reviewer_updates[reviewer_id].update(work)
    for key, value in delta.items():
        kind = key[0]
        if kind == "state":
            state_updates[f"n_{key[1]}"] = value
        elif kind == "profile":
            profiles[key[1]] = value
        elif kind == "pair":
            pairs[key[1:]] = value
        else:  # final_total / final_agree
            reviewer_updates[key[1]][kind] = reviewer_updates[key[1]].get(kind, 0) + value
    parts: list[tuple] = []
    rows = [({"version_id": version_id, "approve": a, "swap": s, "reject": r, "flag": f}, {"count": value})
            for (a, s, r, f), value in sorted(profiles.items()) if value]
    parts += [(VoteProfile, rows)] if rows else []
    rows = [({"version_id": version_id, "rater_a_id": ra, "rater_b_id": rb, "label_a": la, "label_b": lb},
             {"count": value}) for (ra, rb, la, lb), value in sorted(pairs.items()) if value]
    parts += [(PairAgreement, rows)] if rows else []
    rows = [({"version_id": version_id, "reviewer_id": rid}, work)
            for rid in sorted(reviewer_updates) if (work := {k: v for k, v in reviewer_updates[rid].items() if v})]
    parts += [(ReviewerStats, rows)] if rows else []
    written = {key["reviewer_id"] for key, _ in rows}
    state_updates = {k: v for k, v in state_updates.items() if v}
    if reviews:
        state_updates["reviews"] = reviews
    if connection.vendor == "postgresql":
        _send_as_one(version_id, parts, state_updates, also)
        return state_updates, written
    with connection.cursor() as cur:
        for sql, params in also:
            cur.execute(sql, params)
        for model, rows in parts:
            cur.execute(*counter_upsert(model, rows))
    if state_updates:
        VersionReviewStats.objects.filter(pk=version_id).update(**{k: F(k) + v for k, v in state_updates.items()})
    return state_updates, written


def _send_as_one(version_id: int, parts: list[tuple], state_updates: dict[str, int],
                 also: list[tuple[str, list]]) -> None:
    """PostgreSQL: `also`, the counter upserts and the version's counters in one statement; each upsert waits on
    the one before it (a condition on its result), so the counter rows are locked in apply_delta's order."""
    q = connection.ops.quote_name
    ctes, params, gate = [], [], ""
    for i, (sql, p) in enumerate(also):
        ctes.append(f"w{i} AS ({sql} RETURNING 1)")
        params += p
    for i, (model, rows) in enumerate(parts):
        sql, p = counter_upsert(model, rows, gate)
        ctes.append(f"c{i} AS ({sql} RETURNING 1)")
        params += p
        gate = f"(SELECT count(*) FROM c{i}) >= 0"
    if state_updates:
        table = q(VersionReviewStats._meta.db_table)
        sets = ", ".join(f"{q(k)} = {q(k)} + %s" for k in state_updates)
        final = f"UPDATE {table} SET {sets} WHERE {q('version_id')} = %s" + (f" AND {gate}" if gate else "")
        params += [*state_updates.values(), version_id]
    elif ctes:
        final = "SELECT 1"
    else:
        return
    with connection.cursor() as cur:
        cur.execute((f"WITH {', '.join(ctes)} " if ctes else "") + final, params)


@transaction.atomic
def counters_rebuild(*, version: DatasetVersion) -> VersionReviewStats:
    """Recompute every counter of a version from its pair states and reviews (assignments included)."""
    states = dict(PairState.objects.filter(version=version).order_by().values_list("state").annotate(n=Count("pk")))
    labels: dict[int, dict[int, str]] = defaultdict(dict)
    for row_id, reviewer_id, label in (Review.objects.filter(version=version).values_list("row_id", "reviewer_id",
                                                                                          "label").iterator(chunk_size=5000)):
        labels[row_id][reviewer_id] = label
    total: Counter = Counter()
    for row_id, state, final_label in (PairState.objects.filter(version=version, review_count__gt=0)
                                       .values_list("pk", "state", "final_label").iterator(chunk_size=5000)):
        total.update(tally.contribution(tally.RowSnapshot(state, final_label, labels.get(row_id, {}))))
    VoteProfile.objects.filter(version=version).delete()
    PairAgreement.objects.filter(version=version).delete()
    VoteProfile.objects.bulk_create([
        VoteProfile(version=version, approve=k[1][0], swap=k[1][1], reject=k[1][2], flag=k[1][3], count=n)
        for k, n in total.items() if k[0] == "profile" and n])
    PairAgreement.objects.bulk_create([
        PairAgreement(version=version, rater_a_id=k[1], rater_b_id=k[2], label_a=k[3], label_b=k[4], count=n)
        for k, n in total.items() if k[0] == "pair" and n], batch_size=1000)
    per_reviewer: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for key, n in total.items():
        if key[0] in ("final_total", "final_agree"):
            per_reviewer[key[1]][key[0]] += n
    for reviewer_id, assigned in (Assignment.objects.filter(version=version).order_by().values_list("reviewer_id")
                                  .annotate(n=Count("pk"))):
        per_reviewer[reviewer_id]["assigned"] = assigned
    for reviewer_id, done, time_total in (Review.objects.filter(version=version).order_by().values_list("reviewer_id")
                                          .annotate(n=Count("pk"), t=Sum("time_ms"))):
        per_reviewer[reviewer_id]["done"] = done
        per_reviewer[reviewer_id]["time_ms_total"] = time_total
    ReviewerStats.objects.filter(version=version).delete()
    ReviewerStats.objects.bulk_create([ReviewerStats(version=version, reviewer_id=rid, **values)
                                       for rid, values in per_reviewer.items()])
    _rebuild_row_counts(version)
    sources = list(version.rows.order_by("data_source").values_list("data_source", flat=True).distinct()[:500])
    stats, _ = VersionReviewStats.objects.update_or_create(version=version, defaults={
        "data_sources": sources,
        "total": sum(states.values()), "reviews": sum(len(v) for v in labels.values()),
        **{f"n_{s}": states.get(s, 0) for s in State.values}})
    return stats



def _rebuild_row_counts(version: DatasetVersion) -> None:
    """PairState.n_edits / n_comments from the edit and comment tables."""
    PairState.objects.filter(version=version).filter(Q(n_edits__gt=0) | Q(n_comments__gt=0)).update(
        n_edits=0, n_comments=0)
    for model, field in ((ResponseEdit, "n_edits"), (Comment, "n_comments")):
        counts = model.objects.filter(version=version).order_by().values_list("row_id").annotate(n=Count("pk"))
        for row_id, n in counts.iterator(chunk_size=5000):
            PairState.objects.filter(pk=row_id).update(**{field: n})
