"""The pair a decision changes: locked (with the row and the actor's assignment) in one query, and on PostgreSQL
the actor's review written with the pair's reviews and the progress sums read in another.

The reviews are read by a statement sent after the lock is held: one that waits for the lock reads with the
snapshot it started with, so it would miss a review a concurrent decision on the same pair had just committed."""
from __future__ import annotations

import json

from django.db import connection
from django.db.models import OuterRef, Subquery

from webapp.core.statements import from_row, insert_statement
from webapp.review.models import Assignment, PairState, Review, ReviewerStats, VersionReviewStats


def locked_state(*, actor, version_id: int, row_id: int) -> PairState:
    """PairState `row_id` of the version, locked (FOR UPDATE), with the actor's assignment of the pair (held_id,
    held_left, held_done; None without one). PairState.DoesNotExist when the version has no such row."""
    held = Assignment.objects.filter(reviewer=actor, row=OuterRef("pk"))
    return (PairState.objects.select_for_update(of=("self",))
            .annotate(held_id=Subquery(held.values("pk")[:1]), held_left=Subquery(held.values("left_is_chosen")[:1]),
                      held_done=Subquery(held.values("done")[:1]))
            .get(pk=row_id, version_id=version_id))


def review_upsert(review: Review, time_ms_max: int) -> tuple[Review, dict[int, str], dict | None, dict]:
    """PostgreSQL, the pair locked: insert the actor's review, or change theirs (its time added, up to
    time_ms_max), in one statement that also reads, as they were before it, the pair's reviews
    ({reviewer id: label}), the actor's previous label and reason (None when new), the version's counters and the
    progress sums (the version's claimed slots, the actor's assigned and done; None without a counter row).
    Returns the review as stored, the labels, the previous review and {"stats": counters, "sums": sums}."""
    q = connection.ops.quote_name
    table, stats = q(Review._meta.db_table), q(ReviewerStats._meta.db_table)
    counters = VersionReviewStats._meta.concrete_fields
    insert, params = insert_statement(review)
    changed = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in ("decision", "swap", "label", "reason", "choice",
                                                              "updated_at"))
    cols = ", ".join(f"up.{q(f.column)}" for f in Review._meta.concrete_fields)
    sql = (f"WITH old AS (SELECT reviewer_id, label, reason FROM {table} WHERE row_id = %s), "
           f"up AS ({insert} ON CONFLICT (reviewer_id, row_id) DO UPDATE SET {changed}, "
           f"time_ms = LEAST({table}.time_ms + EXCLUDED.time_ms, %s) RETURNING *), "
           f"s AS (SELECT sum(assigned) AS claimed, sum(assigned) FILTER (WHERE reviewer_id = %s) AS assigned, "
           f"sum(done) FILTER (WHERE reviewer_id = %s) AS done FROM {stats} WHERE version_id = %s) "
           f"SELECT {cols}, {', '.join(f'v.{q(f.column)}' for f in counters)}, "
           f"(SELECT json_object_agg(reviewer_id, label) FROM old), "
           f"(SELECT json_build_object('label', label, 'reason', reason) FROM old WHERE reviewer_id = %s), "
           f"s.claimed, s.assigned, s.done FROM up, s, {q(VersionReviewStats._meta.db_table)} v "
           f"WHERE v.version_id = %s")
    n = len(Review._meta.concrete_fields)
    with connection.cursor() as cur:
        cur.execute(sql, [review.row_id, *params, time_ms_max, review.reviewer_id, review.reviewer_id,
                          review.version_id, review.reviewer_id, review.version_id])
        out = cur.fetchone()
    stored, m = from_row(Review, out[:n]), n + len(counters)
    labels, before = (_json(v) for v in out[m:m + 2])
    return (stored, {int(k): v for k, v in (labels or {}).items()}, before,
            {"stats": from_row(VersionReviewStats, out[n:m]),
             "sums": {"claimed": out[m + 2], "assigned": out[m + 3], "done": out[m + 4]}})


def _json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value
