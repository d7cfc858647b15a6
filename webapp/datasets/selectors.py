"""Reads: dataset lists, keyset-paginated rows with filters, row dicts for exports and stats."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.db.models import Count, Exists, F, Max, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import Http404

from webapp.datasets.models import Dataset, DatasetImport, DatasetRow, DatasetVersion, ImportStatus, VersionStatus

REVIEW_STATES = ("unreviewed", "approved", "rejected", "flagged", "conflict")
LENGTH_FIELDS = {"prompt": "prompt_chars", "chosen": "chosen_chars", "rejected": "rejected_chars"}
PAGE_SIZE = 50


def pair_state_model():
    """The review app's per-row final state, when that app provides it."""
    try:
        return apps.get_model("review", "PairState")
    except LookupError:
        return None


def dataset_list(*, project) -> QuerySet[Dataset]:
    ready = DatasetVersion.objects.filter(dataset=OuterRef("pk"), status=VersionStatus.READY).order_by("-number")
    return (Dataset.objects.filter(project=project)
            .annotate(latest_number=Subquery(ready.values("number")[:1]),
                      latest_rows=Subquery(ready.values("row_count")[:1]),
                      latest_created=Subquery(ready.values("created_at")[:1]),
                      version_count=Count("versions", filter=Q(versions__status=VersionStatus.READY)),
                      importing=Count("versions", filter=Q(versions__status=VersionStatus.IMPORTING)))
            .order_by("name"))


def upload_targets(*, project) -> dict[str, dict[str, Any]]:
    """Per existing dataset name: the version number an upload under that name would create, and its kind."""
    rows = (Dataset.objects.filter(project=project).annotate(last=Coalesce(Max("versions__number"), Value(0)))
            .values_list("name", "kind", "last"))
    return {name: {"next": last + 1, "kind": kind} for name, kind, last in rows}


def dataset_get(*, project, dataset_ref: str | int) -> Dataset:
    """A dataset of `project` by id or by name; 404 otherwise."""
    qs = Dataset.objects.filter(project=project)
    ref = str(dataset_ref)
    dataset = (qs.filter(pk=int(ref)).first() if ref.isdigit() else None) or qs.filter(name=ref).first()
    if dataset is None:
        raise Http404("No such dataset")
    return dataset


def version_get(*, project, dataset_id: int | str, number: int | None = None) -> DatasetVersion:
    """A ready version (the latest when `number` is None); 404 otherwise."""
    dataset = dataset_get(project=project, dataset_ref=dataset_id)
    qs = dataset.versions.filter(status=VersionStatus.READY).select_related("dataset", "dataset__project")
    version = qs.filter(number=number).first() if number is not None else qs.order_by("-number").first()
    if version is None:
        raise Http404("No such version")
    return version


def imports_recent(*, project, limit: int = 10) -> QuerySet[DatasetImport]:
    """Imports that need attention: not done, and (for a failed one, or one waiting for a mapping) not since
    re-imported successfully under the same name."""
    redone = DatasetImport.objects.filter(project=project, name=OuterRef("name"), status=ImportStatus.SUCCEEDED,
                                          created_at__gt=OuterRef("created_at"))
    return (DatasetImport.objects.filter(project=project).exclude(status=ImportStatus.SUCCEEDED)
            .exclude(Exists(redone), status__in=[ImportStatus.FAILED, ImportStatus.NEEDS_MAPPING])
            .select_related("created_by").order_by("-created_at")[:limit])


@dataclass
class RowFilters:
    q: str = ""
    data_source: str | None = None
    split: str = ""
    review_state: str = ""
    length_field: str = "prompt"
    min_chars: int | None = None
    max_chars: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.q or self.data_source is not None or self.split or self.review_state
                    or self.min_chars is not None or self.max_chars is not None)


def rows_filtered(version: DatasetVersion, filters: RowFilters) -> QuerySet[DatasetRow]:
    qs = DatasetRow.objects.filter(version=version)
    if filters.q:
        qs = qs.filter(Q(prompt_text__icontains=filters.q) | Q(chosen_text__icontains=filters.q)
                       | Q(rejected_text__icontains=filters.q) | Q(ground_truth__icontains=filters.q))
    if filters.data_source is not None:
        qs = qs.filter(data_source=filters.data_source)
    if filters.split:
        qs = qs.filter(split=filters.split)
    column = LENGTH_FIELDS.get(filters.length_field, "prompt_chars")
    if filters.min_chars is not None:
        qs = qs.filter(**{f"{column}__gte": filters.min_chars})
    if filters.max_chars is not None:
        qs = qs.filter(**{f"{column}__lte": filters.max_chars})
    model = pair_state_model()
    if filters.review_state:
        if model is None:  # no review app yet: every row is unreviewed
            qs = qs if filters.review_state == "unreviewed" else qs.none()
        elif filters.review_state == "unreviewed":
            qs = qs.filter(Q(pair_state__isnull=True) | Q(pair_state__state="unreviewed"))
        else:
            qs = qs.filter(pair_state__state=filters.review_state)
    if model is not None:
        qs = qs.annotate(review_state=Coalesce(F("pair_state__state"), Value("unreviewed")))
    return qs


@dataclass
class RowPage:
    rows: list[DatasetRow]
    prev_before: int | None = None  # pass as ?before= for the previous page
    next_after: int | None = None  # pass as ?after= for the next page
    extra: dict[str, Any] = field(default_factory=dict)


def rows_page(version: DatasetVersion, filters: RowFilters, *, after: int | None = None, before: int | None = None,
              limit: int = PAGE_SIZE, full: bool = False) -> RowPage:
    """Keyset pagination on (version, index): constant cost at any depth, unlike OFFSET."""
    limit = max(1, min(limit, 500))
    qs = rows_filtered(version, filters)
    if not full:  # the table shows the flattened text only
        qs = qs.defer("prompt", "chosen", "rejected", "extra_info")
    if before is not None:
        rows = list(qs.filter(index__lt=before).order_by("-index")[: limit + 1])
        has_more_before = len(rows) > limit
        rows = list(reversed(rows[:limit]))
        has_more_after = True
    else:
        if after is not None:
            qs = qs.filter(index__gt=after)
        rows = list(qs.order_by("index")[: limit + 1])
        has_more_after = len(rows) > limit
        rows = rows[:limit]
        has_more_before = after is not None
    page = RowPage(rows=rows)
    if rows and has_more_before:
        page.prev_before = rows[0].index
    if rows and has_more_after:
        page.next_after = rows[-1].index
    return page


def row_get(version: DatasetVersion, index: int) -> DatasetRow:
    row = DatasetRow.objects.filter(version=version, index=index).first()
    if row is None:
        raise Http404("No such row")
    model = pair_state_model()
    row.review_state = "unreviewed"
    if model is not None:
        state = model.objects.filter(row=row).values_list("state", flat=True).first()
        row.review_state = state or "unreviewed"
    return row


def row_dict(row: DatasetRow) -> dict[str, Any]:
    """A row as the run directory and the exporters see it (docs/run-directory.md)."""
    # A preference pair has no ground truth (None, not ""): VERL exports then use its chosen response.
    ground_truth = row.ground_truth if row.chosen is None else None
    return {"prompt": row.prompt, "chosen": row.chosen, "rejected": row.rejected, "ground_truth": ground_truth,
            "data_source": row.data_source, "ability": row.ability, "extra_info": row.extra_info or {},
            "split": row.split, "index": row.index}


def iter_row_dicts(version: DatasetVersion, chunk: int = 2000) -> Iterator[dict[str, Any]]:
    """Every row of a version in order, read in keyset chunks (bounded memory at any size)."""
    last = -1
    base = DatasetRow.objects.filter(version=version).order_by("index")
    while True:
        batch = list(base.filter(index__gt=last)[:chunk])
        if not batch:
            return
        for row in batch:
            yield row_dict(row)
        last = batch[-1].index


def data_sources(version: DatasetVersion) -> list[str]:
    """Data sources for the filter menu: counted at import time, so no scan of the rows."""
    top = (version.report or {}).get("data_sources", {}).get("top", {})
    return sorted(top)
