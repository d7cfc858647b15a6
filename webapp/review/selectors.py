"""Review reads: the review item, progress, the filtered pair list (keyset), and `training_rows`."""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery, Sum
from django.http import Http404

from webapp.core.access import ProjectAccess, access_of, member_role_of, project_access
from webapp.datasets.models import DatasetKind, DatasetRow, DatasetVersion, VersionStatus
from webapp.review.models import (
    Assignment,
    Comment,
    PairState,
    ResponseEdit,
    Review,
    ReviewerStats,
    State,
    VersionReviewStats,
)
from webapp.review.render import apply_edit, render_value, response_text
from webapp.review.services import orientation
from webapp.review.training import TrainingSelection, expand_ranges, training_rows  # noqa: F401 (public API)

LIST_PAGE_SIZE = 50
SEARCH_WINDOW = 20_000  # rows a text search scans per page (about a quarter second on PostgreSQL)
# A list shows an excerpt of the prompt: leave the long columns in the database.
_LIST_DEFER = ("row__prompt", "row__chosen", "row__rejected", "row__chosen_text", "row__rejected_text",
               "row__extra_info", "row__ground_truth")


def review_versions(project) -> QuerySet[DatasetVersion]:
    """Ready preference versions of a project, newest first."""
    return (DatasetVersion.objects.filter(dataset__project=project, dataset__kind=DatasetKind.PREFERENCE,
                                          status=VersionStatus.READY)
            .select_related("dataset").order_by("dataset__name", "-number"))


def review_access(user, slug: str, version_id: int, min_role: str) -> tuple[ProjectAccess, DatasetVersion]:
    """The user's access to project `slug` and its ready preference version `version_id` (with its review
    counters) in one query: the review screen's requests each need both. 404 / 403 as project_access gives
    them, checked before the version's own 404."""
    version = (DatasetVersion.objects.filter(dataset__project__slug=slug, dataset__kind=DatasetKind.PREFERENCE,
                                             status=VersionStatus.READY, pk=version_id)
               .select_related("dataset__project", "review_stats")
               .annotate(**member_role_of(user, "dataset__project_id")).first())
    if version is None:
        project_access(user, slug, min_role)  # no such project, or no access to it: its answer first
        raise Http404("No ready preference dataset version with this id in this project.")
    access = access_of(user, version.dataset.project, getattr(version, "member_role", None), min_role)
    return access, version


def progress(*, version: DatasetVersion, user, stats: VersionReviewStats | None = None,
             sums: dict | None = None) -> dict:
    """Counters only: never a COUNT over the version's rows. `sums`: the reviewer's `assigned` and `done` and the
    version's `claimed` slots, when the caller has them (a claim reads them, see services._assign)."""
    # The reviewer's counters and the version's claimed slots in one aggregate (read with the version's
    # counters when the caller has not read those).
    agg = {"claimed": Sum("assigned"), "assigned": Sum("assigned", filter=Q(reviewer=user.pk)),
           "done": Sum("done", filter=Q(reviewer=user.pk))}
    if sums is not None and stats is None:
        stats = VersionReviewStats.objects.filter(pk=version.pk).first()
    elif stats is None:
        per_version = ReviewerStats.objects.filter(version=OuterRef("pk")).order_by().values("version")
        stats = VersionReviewStats.objects.filter(pk=version.pk).annotate(
            **{f"sum_{k}": Subquery(per_version.annotate(s=v).values("s")) for k, v in agg.items()}).first()
        if stats is not None:
            sums = {k: getattr(stats, f"sum_{k}") for k in agg}
    if sums is None:
        sums = ReviewerStats.objects.filter(version=version).aggregate(**agg)
    mine = (ReviewerStats(version=version, reviewer_id=user.pk, assigned=sums["assigned"], done=sums["done"] or 0)
            if sums["assigned"] is not None else None)
    total = stats.total if stats else version.row_count
    left, exact = queue_left(version=version, total=total, mine=mine, claimed=sums["claimed"] or 0)
    return {
        "done": mine.done if mine else 0,
        "assigned": mine.assigned if mine else 0,
        "left": left, "left_exact": exact,
        "decided": stats.decided if stats else 0,
        "conflicts": stats.n_conflict if stats else 0,
        "flagged": stats.n_flagged if stats else 0,
        "total": total,
        "reviews": stats.reviews if stats else 0,
    }


def queue_left(*, version: DatasetVersion, total: int, mine: ReviewerStats | None,
               claimed: int | None = None) -> tuple[int, bool]:
    """How many pairs this reviewer may still decide, from counters (one row per reviewer, never the rows):
    their open assignments plus the free reviewer slots on pairs they have not claimed. Each pair has
    `review_overlap` slots; with overlap 1 the count is exact, above it an upper bound (a free slot may sit on a
    pair the reviewer already holds). `claimed`: the version's claimed slots, when the caller has summed them.
    Returns (count, exact)."""
    overlap = max(1, version.dataset.project.review_overlap)
    if claimed is None:
        claimed = ReviewerStats.objects.filter(version=version).aggregate(n=Sum("assigned"))["n"] or 0
    assigned, done = (mine.assigned, mine.done) if mine else (0, 0)
    free = max(0, total * overlap - claimed)
    return max(0, assigned - done) + min(free, max(0, total - assigned)), overlap == 1


def _pane(row: DatasetRow, side: str, edits: dict[str, ResponseEdit]) -> dict:
    edit = edits.get(side)
    value = getattr(row, side)
    if edit is not None:
        value = apply_edit(value, edit.text)
    return {"side": side, "html": render_value(value), "text": edit.text if edit else response_text(value),
            "revision": edit.revision if edit else 0}


_UNSET = object()


def load_row(version: DatasetVersion, row_id: int) -> DatasetRow | None:
    """A row with its review state in one query (and its version object reused, not fetched again)."""
    row = DatasetRow.objects.filter(version=version, pk=row_id).select_related("pair_state").first()
    if row is not None:
        row.version = version
    return row


def _state_of(row: DatasetRow) -> PairState | None:
    try:
        return row.pair_state
    except PairState.DoesNotExist:
        return None


def item_payload(*, row: DatasetRow, user, access: ProjectAccess, assignment=_UNSET) -> dict:
    """Everything the review screen shows for one pair, as JSON-ready data.

    In blind mode a reviewer sees only their own decision and comments; engineers and admins see all.
    The state's counters let a fresh pair (no edits, reviews or comments) cost no further queries.
    """
    project = access.project
    sees_others = not project.review_blind or access.can_engineer
    if assignment is _UNSET:
        assignment = Assignment.objects.filter(row=row, reviewer=user).first()
    left_is_chosen = (assignment.left_is_chosen if assignment
                      else orientation(row_id=row.pk, reviewer_id=user.pk))
    state = _state_of(row)
    edits: dict[str, ResponseEdit] = {}
    if state is None or state.n_edits:
        for edit in ResponseEdit.objects.filter(row=row).order_by("side", "revision"):
            edits[edit.side] = edit  # the last revision of each side wins
    chosen, rejected = _pane(row, "chosen", edits), _pane(row, "rejected", edits)
    reviews: list[Review] = []
    if state is None or state.review_count:
        reviews_qs = Review.objects.filter(row=row).select_related("reviewer").order_by("created_at")
        reviews = list(reviews_qs if sees_others else reviews_qs.filter(reviewer=user))
    mine = next((r for r in reviews if r.reviewer_id == user.pk), None)
    comments: list[Comment] = []
    if state is None or state.n_comments:
        comments_qs = Comment.objects.filter(row=row).select_related("author")
        comments = list(comments_qs if sees_others else comments_qs.filter(author=user))
    payload = {
        "row_id": row.pk, "index": row.index, "split": row.split, "data_source": row.data_source,
        "version_id": row.version_id,
        "prompt_html": render_value(row.prompt),
        "left": chosen if left_is_chosen else rejected,
        "right": rejected if left_is_chosen else chosen,
        "assigned": assignment is not None,
        "my_review": review_json(mine) if mine else None,
        "comments": [{"author": c.author.username if c.author else "?", "text": c.text,
                      "created_at": c.created_at.isoformat()} for c in comments],
        "revisions": {side: e.revision for side, e in edits.items()},
    }
    if sees_others:
        payload["state"] = _state_json(state)
        payload["reviews"] = [review_json(r) | {"reviewer": r.reviewer.username} for r in reviews]
    return payload


def review_json(review: Review) -> dict:
    return {"label": review.label, "decision": review.decision, "swap": review.swap, "reason": review.reason,
            "choice": review.choice, "time_ms": review.time_ms, "created_at": review.created_at.isoformat(),
            "updated_at": review.updated_at.isoformat()}


def _state_json(state: PairState | None) -> dict:
    if state is None:
        return {"state": State.UNREVIEWED, "final_label": "", "source": "", "votes": [0, 0, 0, 0]}
    return {"state": state.state, "final_label": state.final_label, "final_swap": state.final_swap,
            "source": state.decision_source, "votes": list(state.votes),
            "resolved_by": state.resolved_by.username if state.resolved_by_id else None,
            "resolved_at": state.resolved_at.isoformat() if state.resolved_at else None}


def assignment_prev(*, version: DatasetVersion, reviewer, before_index: int) -> Assignment | None:
    return (Assignment.objects.filter(reviewer=reviewer, version=version, row_index__lt=before_index)
            .order_by("-row_index").first())


@dataclass
class PairFilter:
    state: str = ""
    flagged: bool = False
    disagreement: bool = False
    data_source: str = ""
    reviewer_id: int | None = None
    q: str = ""
    index_from: int | None = None
    index_to: int | None = None
    extra: dict = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.state or self.flagged or self.disagreement or self.data_source or self.reviewer_id
                    or self.q or self.index_from is not None or self.index_to is not None)


def pairs_queryset(*, version: DatasetVersion, f: PairFilter) -> QuerySet[PairState]:
    qs = PairState.objects.filter(version_id=version.pk)
    if f.state:
        qs = qs.filter(state=f.state)
    if f.flagged:
        qs = qs.filter(votes_flag__gt=0)
    if f.disagreement:
        qs = qs.filter(disagreement=True)
    if f.index_from is not None:
        qs = qs.filter(row_index__gte=f.index_from)
    if f.index_to is not None:
        qs = qs.filter(row_index__lte=f.index_to)
    if f.data_source:
        qs = qs.filter(row__data_source=f.data_source)
    if f.reviewer_id:
        qs = qs.filter(Exists(Review.objects.filter(row_id=OuterRef("pk"), reviewer_id=f.reviewer_id)))
    if f.q:
        qs = qs.filter(Q(row__prompt_text__icontains=f.q) | Q(row__chosen_text__icontains=f.q)
                       | Q(row__rejected_text__icontains=f.q))
    return qs


def pairs_page(*, version: DatasetVersion, f: PairFilter, after: int | None = None,
               limit: int = LIST_PAGE_SIZE) -> tuple[list[PairState], int | None, int | None]:
    """One page of pairs in row order after index `after` (keyset: no OFFSET).

    Returns (pairs, next cursor, last row searched). Text search has no index, so one page looks at
    SEARCH_WINDOW rows at most and says where it stopped; the next page carries on from there.
    """
    qs = pairs_queryset(version=version, f=f)
    if after is not None:
        qs = qs.filter(row_index__gt=after)
    searched_to = None
    if f.q:
        start = after + 1 if after is not None else (f.index_from or 0)
        qs = qs.filter(row_index__lt=start + SEARCH_WINDOW)
        searched_to = start + SEARCH_WINDOW - 1
    page = list(qs.select_related("row", "resolved_by").defer(*_LIST_DEFER).order_by("row_index")[: limit + 1])
    next_after = page[limit - 1].row_index if len(page) > limit else None
    if searched_to is not None:
        if next_after is not None:
            searched_to = next_after
        elif searched_to < version.row_count - 1 and (f.index_to is None or searched_to < f.index_to):
            next_after = searched_to  # nothing more in this window: the next page searches the next one
        else:
            searched_to = None  # reached the end
    return page[:limit], next_after, searched_to


def pair_row_ids(*, version: DatasetVersion, f: PairFilter, limit: int) -> list[int]:
    return list(pairs_queryset(version=version, f=f).order_by("row_index").values_list("pk", flat=True)[:limit])


def data_sources(version: DatasetVersion) -> list[str]:
    """The version's data sources, stored once with its review states (no DISTINCT over a million rows)."""
    stats = VersionReviewStats.objects.filter(pk=version.pk).only("data_sources").first()
    return list(stats.data_sources) if stats else []


def conflicts_page(*, version: DatasetVersion, after: int | None = None, include_flagged: bool = True,
                   limit: int = LIST_PAGE_SIZE) -> tuple[list[PairState], int | None]:
    """Pairs waiting for an admin: conflicts (and flagged pairs), in row order."""
    states = [State.CONFLICT, State.FLAGGED] if include_flagged else [State.CONFLICT]
    qs = PairState.objects.filter(version_id=version.pk, state__in=states)
    if after is not None:
        qs = qs.filter(row_index__gt=after)
    page = list(qs.select_related("row").defer(*_LIST_DEFER).order_by("row_index")[: limit + 1])
    next_after = page[limit - 1].row_index if len(page) > limit else None
    return page[:limit], next_after


def reviews_by_row(row_ids: list[int]) -> dict[int, list[Review]]:
    out: dict[int, list[Review]] = {}
    for review in Review.objects.filter(row_id__in=row_ids).select_related("reviewer").order_by("created_at"):
        out.setdefault(review.row_id, []).append(review)
    return out
