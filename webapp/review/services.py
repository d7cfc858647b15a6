"""Review services (writes): claims, decisions, edits, comments, conflict resolution, bulk actions.

Each change to a pair locks its PairState row, recomputes the row's state from its reviews
(webapp.review.tally) and adds the difference to the version's counters in the same transaction.
"""
from __future__ import annotations

import hashlib
import hmac
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q
from django.utils import timezone

from webapp.core.audit import audit, audit_entry
from webapp.core.models import AuditLog, Project
from webapp.core.services import ApplicationError
from webapp.core.statements import from_row, insert_statement, update_statement
from webapp.core.text import count
from webapp.datasets.models import DatasetRow, DatasetVersion, VersionStatus
from webapp.review import tally
from webapp.review.counters import apply_delta, bump, counter_upsert
from webapp.review.models import (
    Assignment,
    Comment,
    PairState,
    ResponseEdit,
    Review,
    ReviewerStats,
    Side,
    Source,
    State,
    VersionReviewStats,
)
from webapp.review.pair_lock import locked_state, review_upsert
from webapp.review.render import response_text

BULK_MAX_ROWS = 10_000
BULK_ACTIONS = ("approve", "swap", "reject", "flag", "reset")
RESOLVE_LABELS = ("approve", "swap", "reject")
REASON_MAX = 500
COMMENT_MAX = 5_000
TIME_MS_MAX = 3_600_000  # an hour: longer means the tab was left open
AUDIT_TEXT_MAX = 20_000
DATA_SOURCES_MAX = 500  # offered in the list filter


# --- pair states ------------------------------------------------------------------------------

def ensure_pair_states(*, version: DatasetVersion) -> VersionReviewStats:
    """Create the review state of every row of a ready version once (idempotent); return its counters
    (those loaded with the version when it was read with them, see selectors.review_access)."""
    try:
        stats = version.review_stats
    except VersionReviewStats.DoesNotExist:
        stats = None
    if stats is not None:
        return stats
    if version.status != VersionStatus.READY:
        raise ApplicationError("This dataset version is not ready yet; review starts once its import finished.")
    with transaction.atomic():
        # Lock the version so two first visits do not insert the same states twice.
        DatasetVersion.objects.select_for_update().filter(pk=version.pk).first()
        stats = VersionReviewStats.objects.filter(pk=version.pk).first()
        if stats is not None:
            return stats
        _insert_missing_states(version.pk)
        counts = dict(PairState.objects.filter(version_id=version.pk).order_by()
                      .values_list("state").annotate(n=Count("pk")))
        sources = list(DatasetRow.objects.filter(version=version).order_by("data_source")
                       .values_list("data_source", flat=True).distinct()[:DATA_SOURCES_MAX])
        stats = VersionReviewStats.objects.create(
            version=version, total=sum(counts.values()), data_sources=sources,
            **{f"n_{s}": counts.get(s, 0) for s in State.values})
    return stats


def _insert_missing_states(version_id: int) -> None:
    # One INSERT ... SELECT: a million rows in seconds, not a million ORM objects.
    q = connection.ops.quote_name
    ps, dr = q(PairState._meta.db_table), q(DatasetRow._meta.db_table)
    sql = (f"INSERT INTO {ps} (row_id, version_id, row_index, state, final_label, final_swap, decision_source, "
           f"claims, review_count, votes_approve, votes_swap, votes_reject, votes_flag, disagreement, n_edits, "
           f"n_comments, updated_at) "
           f"SELECT r.id, r.version_id, r.{q('index')}, %s, '', %s, '', 0, 0, 0, 0, 0, 0, %s, 0, 0, %s "
           f"FROM {dr} r WHERE r.version_id = %s AND NOT EXISTS (SELECT 1 FROM {ps} p WHERE p.row_id = r.id)")
    with connection.cursor() as cursor:
        cursor.execute(sql, [State.UNREVIEWED, False, False, timezone.now(), version_id])
        if connection.vendor == "postgresql" and cursor.rowcount > 10_000:
            # Fresh statistics now, not when autovacuum gets to it: the claim queries need them.
            cursor.execute(f"ANALYZE {ps}")


# --- assignments ------------------------------------------------------------------------------

def orientation(*, row_id: int, reviewer_id: int) -> bool:
    """Whether the chosen response is shown on the left: a keyed coin flip per (row, reviewer).

    Keyed so that it looks random to reviewers, and stable so the screen, the recorded assignment and
    the resolution of a left/right choice always agree.
    """
    digest = hmac.new(settings.SECRET_KEY.encode(), f"review-side:{row_id}:{reviewer_id}".encode(),
                      hashlib.sha256).digest()
    return bool(digest[0] & 1)


def _assign(*, version_id: int, reviewer, row_id: int, row_index: int, count: bool = True) -> Assignment:
    """The assignment of a slot just taken (inside the claim's transaction), and the reviewer's `assigned`.

    On PostgreSQL both are one statement, which also reads the counters the reviewer's progress needs after
    it (their own, and the version's claimed slots): `assignment.counters`."""
    left = orientation(row_id=row_id, reviewer_id=reviewer.pk)
    if not (count and connection.vendor == "postgresql"):
        assignment = Assignment.objects.create(reviewer=reviewer, row_id=row_id, version_id=version_id,
                                               row_index=row_index, left_is_chosen=left)
        if count:
            bump(ReviewerStats, {"version_id": version_id, "reviewer_id": reviewer.pk}, assigned=1)
        return assignment
    q = connection.ops.quote_name
    at = timezone.now()
    upsert, params = counter_upsert(ReviewerStats, [({"version_id": version_id, "reviewer_id": reviewer.pk},
                                                     {"assigned": 1})], gate="(SELECT count(*) FROM a) >= 0")
    stats = q(ReviewerStats._meta.db_table)
    sql = (f"WITH a AS (INSERT INTO {q(Assignment._meta.db_table)} (reviewer_id, row_id, version_id, row_index, "
           f"left_is_chosen, done, claimed_at, done_at) VALUES (%s, %s, %s, %s, %s, false, %s, NULL) RETURNING id), "
           f"c AS ({upsert} RETURNING assigned, done) "
           f"SELECT a.id, c.assigned, c.done, (SELECT COALESCE(SUM(assigned), 0) FROM {stats} "
           f"WHERE version_id = %s AND reviewer_id <> %s) FROM a, c")
    with connection.cursor() as cur:
        cur.execute(sql, [reviewer.pk, row_id, version_id, row_index, left, at, *params, version_id, reviewer.pk])
        pk, assigned, done, others = cur.fetchone()
    assignment = Assignment(pk=pk, reviewer=reviewer, row_id=row_id, version_id=version_id, row_index=row_index,
                            left_is_chosen=left, done=False, claimed_at=at)
    assignment.counters = {"assigned": assigned, "done": done, "claimed": others + assigned}
    return assignment


def _claim(*, version_id: int, reviewer, row_id: int, row_index: int, overlap: int,
           count: bool = True) -> Assignment | None:
    """Take one reviewer slot of a pair by a conditional update; None when it is full or already mine.

    `count=False` leaves the reviewer's `assigned` counter to the caller (review_submit adds it with
    its other counters, in lock order)."""
    try:
        with transaction.atomic():
            taken = PairState.objects.filter(pk=row_id, state=State.UNREVIEWED, claims__lt=overlap).update(
                claims=F("claims") + 1)
            if taken != 1:
                return None
            assignment = _assign(version_id=version_id, reviewer=reviewer, row_id=row_id, row_index=row_index,
                                 count=count)
    except IntegrityError:
        return None  # a concurrent request of the same reviewer claimed it first
    return assignment


def _claim_after(*, version_id: int, reviewer, cursor: int, overlap: int) -> Assignment | None:
    """Find and take a slot of the first open pair after `cursor` in one statement, preferring pairs other
    reviewers started (claims = overlap - 1 first, then fewer): the conditions are checked again on the row
    it takes, so two reviewers never overfill a pair. None when there was none, or a concurrent claim won."""
    q = connection.ops.quote_name
    ps = q(PairState._meta.db_table)
    picks = [f"(SELECT row_id FROM {ps} WHERE version_id = %s AND state = %s AND claims = %s AND row_index > %s "
             f"ORDER BY row_index LIMIT 1)" for _ in range(overlap)]
    params: list = [x for claims in range(overlap - 1, -1, -1) for x in (version_id, State.UNREVIEWED, claims, cursor)]
    update = (f"UPDATE {ps} SET claims = claims + 1 WHERE row_id = COALESCE({', '.join(picks)}, NULL) "
              f"AND state = %s AND claims < %s RETURNING ")
    # On PostgreSQL the statement also returns the pair with its state, as the review screen shows it next.
    with_row = connection.vendor == "postgresql"
    states, rows = PairState._meta.concrete_fields, DatasetRow._meta.concrete_fields
    if with_row:
        taken_cols = ", ".join(f"t.{q(f.column)}" for f in states)
        sql = (f"WITH t AS ({update}*) SELECT {taken_cols}, {', '.join(f'r.{q(f.column)}' for f in rows)} FROM t "
               f"JOIN {q(DatasetRow._meta.db_table)} r ON r.id = t.row_id")
    else:
        sql = update + "row_id, row_index"
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(sql, [*params, State.UNREVIEWED, overlap])
            taken = cur.fetchone()
            if taken is None:
                return None
            row = None
            if with_row:
                state = from_row(PairState, taken[:len(states)])
                row = from_row(DatasetRow, taken[len(states):])
                DatasetRow.pair_state.related.set_cached_value(row, state)
                taken = (state.pk, state.row_index)
            assignment = _assign(version_id=version_id, reviewer=reviewer, row_id=taken[0], row_index=taken[1])
            assignment.claimed_row = row
    except IntegrityError:
        return None  # a concurrent request of the same reviewer claimed it first
    return assignment


_READ = object()  # assignment_claim reads the cursor itself


def assignment_claim(*, version: DatasetVersion, reviewer, overlap: int,
                     cursor: int | None | object = _READ) -> Assignment | None:
    """Claim the next pair that still needs reviewers, or None when there is none for this reviewer.

    Keyset search after the reviewer's cursor (the highest row they hold; the caller may pass it when it
    read it already), preferring pairs other reviewers already started so items reach their `overlap`
    reviews sooner.
    """
    overlap = max(1, overlap)
    if cursor is _READ:
        cursor = Assignment.objects.filter(reviewer=reviewer, version=version).aggregate(m=Max("row_index"))["m"]
    cursor = -1 if cursor is None else cursor
    open_states = PairState.objects.filter(version_id=version.pk, state=State.UNREVIEWED)
    for _ in range(20):
        assignment = _claim_after(version_id=version.pk, reviewer=reviewer, cursor=cursor, overlap=overlap)
        if assignment is not None:
            return assignment
        # Rare: nothing left ahead, or a concurrent claim took the pair first (then try again).
        if not open_states.filter(claims__lt=overlap, row_index__gt=cursor).exists():
            break
    # Behind the cursor: slots freed by released assignments or a raised overlap.
    mine = Assignment.objects.filter(reviewer=reviewer, row_id=OuterRef("pk"))
    for _ in range(20):
        candidate = (open_states.filter(claims__lt=overlap).exclude(Exists(mine)).order_by("row_index")
                     .values_list("pk", "row_index").first())
        if candidate is None:
            return None
        assignment = _claim(version_id=version.pk, reviewer=reviewer, row_id=candidate[0], row_index=candidate[1],
                            overlap=overlap)
        if assignment is not None:
            return assignment
    return None


def assignment_next(*, version: DatasetVersion, reviewer, overlap: int,
                    after_index: int | None = None) -> Assignment | None:
    """The reviewer's next pair: with `after_index`, the next one they hold after it (their history
    forward); without it, their first open one. Then a newly claimed pair, then any open one left."""
    mine = Assignment.objects.filter(reviewer=reviewer, version=version)
    # Where the pair held next is and the claim cursor in one aggregate: the usual case (nothing held
    # further on, a new claim) then reads no assignment row.
    wanted = Q(row_index__gt=after_index) if after_index is not None else Q(done=False)
    seek = mine.aggregate(found=Min("row_index", filter=wanted), cursor=Max("row_index"))
    if seek["found"] is not None:
        found = mine.filter(row_index=seek["found"]).first()
        if found is not None:
            return found
    claimed = assignment_claim(version=version, reviewer=reviewer, overlap=overlap, cursor=seek["cursor"])
    if claimed is not None:
        return claimed
    return mine.filter(done=False).order_by("row_index").first()


@transaction.atomic
def assignments_release(*, actor, project: Project, version: DatasetVersion, reviewer) -> int:
    """Give a reviewer's open (undecided) pairs back to the pool; return how many."""
    open_rows = list(Assignment.objects.filter(reviewer=reviewer, version=version, done=False)
                     .values_list("row_id", flat=True))
    for start in range(0, len(open_rows), 1000):
        chunk = open_rows[start:start + 1000]
        PairState.objects.filter(pk__in=chunk, claims__gt=0).update(claims=F("claims") - 1)
    Assignment.objects.filter(reviewer=reviewer, version=version, done=False).delete()
    if open_rows:
        bump(ReviewerStats, {"version_id": version.pk, "reviewer_id": reviewer.pk}, assigned=-len(open_rows))
    audit(actor=actor, action="review.release", project=project, obj=version,
          summary=f"Released {count(len(open_rows), 'open pair')} of {reviewer.username}",
          before={"open": len(open_rows)}, after={"open": 0})
    return len(open_rows)


# --- decisions --------------------------------------------------------------------------------

def _snapshot(state: PairState, labels: Mapping[int, str]) -> tally.RowSnapshot:
    return tally.RowSnapshot(state=state.state, final_label=state.final_label, labels=dict(labels))


def _recompute(state: PairState, labels: Mapping[int, str], overlap: int) -> tally.RowSnapshot:
    """Set a PairState's derived fields from its reviews (and any manual decision); not saved."""
    values = list(labels.values())
    new_state, final_label, source = tally.derive_state(labels=values, overlap=overlap,
                                                        source=state.decision_source, final_label=state.final_label)
    state.state, state.final_label, state.decision_source = new_state, final_label, source
    state.final_swap = final_label == "swap"
    state.review_count = len(values)
    state.votes_approve, state.votes_swap, state.votes_reject, state.votes_flag = tally.votes_of(values)
    state.disagreement = len(set(values)) > 1
    return _snapshot(state, labels)


STATE_FIELDS = ["state", "final_label", "final_swap", "decision_source", "review_count", "votes_approve",
                "votes_swap", "votes_reject", "votes_flag", "disagreement", "resolved_by", "resolved_at", "updated_at"]


def _state_dict(state: PairState) -> dict:
    return {"state": state.state, "final_label": state.final_label, "source": state.decision_source}


@transaction.atomic
def review_submit(*, actor, project: Project, row: DatasetRow | None = None, choice: str, reason: str = "",
                  time_ms: int = 0, version: DatasetVersion | None = None, row_id: int | None = None) -> Review:
    """Record (or change) the actor's decision on a pair (`row`, or `row_id` of `version`: PairState.DoesNotExist
    when it has none) and update its state. The review carries `progress`: selectors.progress's stats and sums after
    the decision where it read them (PostgreSQL), else {}."""
    if choice not in tally.CHOICES:
        raise ApplicationError(f"Unknown action '{choice}'; use one of {', '.join(tally.CHOICES)}.", field="choice")
    reason = (reason or "").strip()
    if choice == "flag" and not reason:
        raise ApplicationError("Say why you flag this pair.", field="reason")
    if len(reason) > REASON_MAX:
        raise ApplicationError(f"Keep the reason under {REASON_MAX} characters.", field="reason")
    time_ms = max(0, min(int(time_ms or 0), TIME_MS_MAX))
    if row is not None:
        version, row_id = row.version, row.pk
    ensure_pair_states(version=version)
    state = locked_state(actor=actor, version_id=version.pk, row_id=row_id)
    if row is None:
        row = DatasetRow(pk=row_id, version=version, index=state.row_index)
    work = {"time_ms_total": time_ms}
    assignment = None
    if state.held_id is not None:
        assignment = Assignment(pk=state.held_id, reviewer=actor, row=row, version_id=row.version_id,
                                row_index=row.index, left_is_chosen=state.held_left, done=state.held_done)
    if assignment is None:
        assignment = _claim(version_id=row.version_id, reviewer=actor, row_id=row.pk, row_index=row.index,
                            overlap=project.review_overlap, count=False)
        if assignment is None:
            raise ApplicationError("This pair already has its reviewers or a final decision; take the next one.")
        work["assigned"] = 1
        state.refresh_from_db()
    decision, swap = tally.resolve_choice(choice, assignment.left_is_chosen)
    label = tally.label_of(decision, swap)
    shown = choice if choice in ("left", "right") else ""
    progress: dict = {}
    if connection.vendor == "postgresql":  # the review written with the reads below, in one statement
        review, labels, before, progress = review_upsert(Review(
            reviewer=actor, row=row, version_id=row.version_id, decision=decision, swap=swap, reason=reason,
            label=label, left_is_chosen=assignment.left_is_chosen, choice=shown, time_ms=time_ms), TIME_MS_MAX)
        review.row = row
    else:
        reviews = list(Review.objects.filter(row=row))
        labels = {r.reviewer_id: r.label for r in reviews}
        review = next((r for r in reviews if r.reviewer_id == actor.pk), None)
        before = {"label": review.label, "reason": review.reason} if review else None
        if review is None:
            review = Review.objects.create(reviewer=actor, row=row, version_id=row.version_id, decision=decision,
                                           swap=swap, reason=reason, label=label, choice=shown, time_ms=time_ms,
                                           left_is_chosen=assignment.left_is_chosen)
        else:
            review.decision, review.swap, review.label, review.reason = decision, swap, label, reason
            review.choice, review.time_ms = shown, min(review.time_ms + time_ms, TIME_MS_MAX)
            review.save()
    if before is None:
        work["done"] = 1
    old = _snapshot(state, labels)
    # The assignment, the pair's state, the audit entry and the counters: one statement on PostgreSQL.
    writes = []
    if not assignment.done:
        assignment.done, assignment.done_at = True, timezone.now()
        writes.append(update_statement(assignment, ["done", "done_at"]))
    labels[actor.pk] = label
    new = _recompute(state, labels, project.review_overlap)
    writes.append(update_statement(state, STATE_FIELDS))
    writes.append(insert_statement(audit_entry(
        actor=actor, action="review.decide", project=project, obj=review,
        summary=f"Row {row.index} of {row.version}: {label}" + (f" ({reason})" if reason else ""),
        before={"review": before, **{"pair": {"state": old.state, "final_label": old.final_label}}},
        after={"review": {"label": label, "reason": reason, "choice": choice,
                          "left_is_chosen": assignment.left_is_chosen}, "pair": _state_dict(state)})))
    applied, written = apply_delta(row.version_id, tally.delta(old, new), reviewer_work={actor.pk: work},
                                   reviews=int("done" in work), also=writes)
    if progress:  # read before the decision's writes: add them
        for name, value in applied.items():
            setattr(progress["stats"], name, getattr(progress["stats"], name) + value)
        sums, mine = progress["sums"], progress["sums"]["assigned"] is not None or actor.pk in written
        progress["sums"] = {"claimed": (sums["claimed"] or 0) + work.get("assigned", 0),
                            "assigned": (sums["assigned"] or 0) + work.get("assigned", 0) if mine else None,
                            "done": (sums["done"] or 0) + work.get("done", 0) if mine else None}
    review.progress = progress
    return review


@transaction.atomic
def conflict_resolve(*, actor, project: Project, row: DatasetRow, label: str) -> PairState:
    """An admin's final decision on a pair (usually a conflict or a flagged pair)."""
    if label not in RESOLVE_LABELS:
        raise ApplicationError(f"Resolve with one of {', '.join(RESOLVE_LABELS)}.", field="label")
    ensure_pair_states(version=row.version)
    state = PairState.objects.select_for_update().get(pk=row.pk)
    labels = dict(Review.objects.filter(row_id=row.pk).values_list("reviewer_id", "label"))
    old = _snapshot(state, labels)
    before = _state_dict(state)
    state.decision_source, state.final_label = Source.ADMIN, label
    state.resolved_by, state.resolved_at = actor, timezone.now()
    new = _recompute(state, labels, project.review_overlap)
    state.save(update_fields=STATE_FIELDS)
    apply_delta(row.version_id, tally.delta(old, new))
    audit(actor=actor, action="review.resolve", project=project, obj=state,
          summary=f"Row {row.index} of {row.version}: resolved as {label}", before=before, after=_state_dict(state))
    return state


@transaction.atomic
def bulk_apply(*, actor, project: Project, version: DatasetVersion, row_ids: Sequence[int], action: str) -> int:
    """Set (or with "reset", clear) the final decision of many pairs at once; return how many changed."""
    if action not in BULK_ACTIONS:
        raise ApplicationError(f"Unknown bulk action '{action}'; use one of {', '.join(BULK_ACTIONS)}.",
                               field="action")
    row_ids = sorted({int(i) for i in row_ids})
    if not row_ids:
        raise ApplicationError("Select at least one pair.")
    if len(row_ids) > BULK_MAX_ROWS:
        raise ApplicationError(f"A bulk action applies to at most {BULK_MAX_ROWS:,} pairs; narrow the filter.")
    ensure_pair_states(version=version)
    now = timezone.now()
    deltas: list[dict[Hashable, int]] = []
    entries: list[AuditLog] = []
    changed: list[PairState] = []
    for start in range(0, len(row_ids), 1000):
        chunk = row_ids[start:start + 1000]
        states = list(PairState.objects.select_for_update().filter(version=version, pk__in=chunk).order_by("pk"))
        labels: dict[int, dict[int, str]] = defaultdict(dict)
        for row_id, reviewer_id, label in Review.objects.filter(row_id__in=chunk).values_list(
                "row_id", "reviewer_id", "label"):
            labels[row_id][reviewer_id] = label
        for state in states:
            old = _snapshot(state, labels[state.pk])
            before = _state_dict(state)
            if action == "reset":
                state.decision_source, state.final_label, state.resolved_by, state.resolved_at = "", "", None, None
            else:
                state.decision_source, state.final_label = Source.BULK, action
                state.resolved_by, state.resolved_at = actor, now
            new = _recompute(state, labels[state.pk], project.review_overlap)
            state.updated_at = now
            deltas.append(tally.delta(old, new))
            changed.append(state)
            entries.append(AuditLog(project=project, actor=actor, action="review.bulk", object_type="PairState",
                                    object_id=str(state.pk), summary=f"Row {state.row_index}: bulk {action}",
                                    before=before, after=_state_dict(state)))
    PairState.objects.bulk_update(changed, STATE_FIELDS, batch_size=1000)
    apply_delta(version.pk, tally.merge(deltas))
    # One entry per pair, written in bulk: same fields as webapp.core.audit.audit().
    AuditLog.objects.bulk_create(entries, batch_size=1000)
    return len(changed)


# --- edits and comments -----------------------------------------------------------------------

def _clip(text: str) -> str:
    return text if len(text) <= AUDIT_TEXT_MAX else text[:AUDIT_TEXT_MAX] + f"… [{len(text):,} characters]"


def current_text(row: DatasetRow, side: str) -> tuple[str, int]:
    """The text of a side as reviewers see it now, and its revision (0 = the original)."""
    edit = ResponseEdit.objects.filter(row=row, side=side).order_by("-revision").first()
    if edit is not None:
        return edit.text, edit.revision
    return response_text(getattr(row, side)), 0


@transaction.atomic
def response_edit(*, actor, project: Project, row: DatasetRow, side: str, text: str) -> ResponseEdit:
    """Save a new revision of the chosen or rejected response; the dataset row is left untouched."""
    if side not in Side.values:
        raise ApplicationError("Edit either the chosen or the rejected response.", field="side")
    text = (text or "").replace("\r\n", "\n")
    if not text.strip():
        raise ApplicationError("An edited response cannot be empty; reject the pair instead.", field="text")
    if len(text) > settings.DATASET_MAX_TEXT_CHARS:
        raise ApplicationError(f"Keep a response under {settings.DATASET_MAX_TEXT_CHARS:,} characters.", field="text")
    ensure_pair_states(version=row.version)
    PairState.objects.select_for_update().filter(pk=row.pk).first()  # serialises revision numbers
    before, revision = current_text(row, side)
    if text == before:
        raise ApplicationError("The text is unchanged.", field="text")
    edit = ResponseEdit.objects.create(row=row, version_id=row.version_id, side=side, revision=revision + 1,
                                       text=text, author=actor)
    PairState.objects.filter(pk=row.pk).update(n_edits=F("n_edits") + 1)
    audit(actor=actor, action="review.edit", project=project, obj=edit,
          summary=f"Row {row.index} of {row.version}: {side} revision {revision + 1}",
          before={"side": side, "revision": revision, "text": _clip(before)},
          after={"side": side, "revision": revision + 1, "text": _clip(text)})
    return edit


@transaction.atomic
def comment_add(*, actor, project: Project, row: DatasetRow, text: str) -> Comment:
    text = (text or "").strip()
    if not text:
        raise ApplicationError("Write a comment first.", field="text")
    if len(text) > COMMENT_MAX:
        raise ApplicationError(f"Keep a comment under {COMMENT_MAX:,} characters.", field="text")
    ensure_pair_states(version=row.version)
    comment = Comment.objects.create(row=row, version_id=row.version_id, author=actor, text=text)
    PairState.objects.filter(pk=row.pk).update(n_comments=F("n_comments") + 1)
    audit(actor=actor, action="review.comment", project=project, obj=comment,
          summary=f"Row {row.index} of {row.version}: comment", after={"text": _clip(text)})
    return comment
