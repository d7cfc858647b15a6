"""New versions derived from an existing one: cleaning by a quality report, and the generic `version_derive`.

Nothing is deleted in place: the kept rows are copied into a new version of the same dataset (one
INSERT … SELECT in the database, renumbered 0..n-1, splits kept), whose `parent` is the source version
and whose `lineage` says what was dropped, how many, and by which report. All-or-nothing: the version,
its rows and the audit entry are written in one transaction.
"""
from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable
from typing import Any

import orjson
from django.db import connection, transaction
from django.db.models import Count, Max
from django.utils import timezone

from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets import ingest
from webapp.datasets.models import Dataset, DatasetRow, DatasetVersion, QualityReport, ReportStatus, VersionStatus
from webapp.datasets.quality import ALGORITHM
from webapp.datasets.shapes import stored_value

_DUMP = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_DROP_TABLE = "wb_derive_drop"


def _copy_rows(source_id: int, target_id: int, drop: list[int]) -> None:
    """Copy the rows of `source_id` not in `drop` into `target_id`, renumbered in order (SQLite and PostgreSQL)."""
    table = connection.ops.quote_name(DatasetRow._meta.db_table)
    q = connection.ops.quote_name
    columns = [f.column for f in DatasetRow._meta.concrete_fields if f.name not in ("id", "version", "index")]
    cols = ", ".join(q(c) for c in columns)
    src = ", ".join(f"r.{q(c)}" for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {_DROP_TABLE}")
        cursor.execute(f"CREATE TEMPORARY TABLE {_DROP_TABLE} (idx integer PRIMARY KEY)")
        for start in range(0, len(drop), 5000):
            cursor.executemany(f"INSERT INTO {_DROP_TABLE} (idx) VALUES (%s)", [(i,) for i in drop[start:start + 5000]])
        cursor.execute(
            f"INSERT INTO {table} ({q('version_id')}, {q('index')}, {cols}) "
            f"SELECT %s, ROW_NUMBER() OVER (ORDER BY r.{q('index')}) - 1, {src} FROM {table} r "
            f"WHERE r.{q('version_id')} = %s AND NOT EXISTS "
            f"(SELECT 1 FROM {_DROP_TABLE} d WHERE d.idx = r.{q('index')})", [target_id, source_id])
        cursor.execute(f"DROP TABLE {_DROP_TABLE}")


def _content(version_id: int) -> tuple[str, array, dict[str, int]]:
    """The content hash as an import of the same rows computes it, the row-hash prefixes and the sources."""
    digest = hashlib.sha256()
    prefixes = array("Q")
    sources: dict[str, int] = {}
    fields = ("index", "prompt", "chosen", "rejected", "ground_truth", "data_source", "ability", "extra_info",
              "row_hash", "prompt_text", "chosen_text", "rejected_text")
    last = -1
    base = DatasetRow.objects.filter(version_id=version_id).order_by("index").values_list(*fields)
    while rows := list(base.filter(index__gt=last)[:5000]):
        for _, prompt, chosen, rejected, truth, source, ability, extra, row_hash, *texts in rows:
            prompt, chosen, rejected = (stored_value(v, t) for v, t in zip((prompt, chosen, rejected), texts,
                                                                          strict=True))
            parts = (orjson.dumps(prompt, option=_DUMP), orjson.dumps(chosen, option=_DUMP),
                     orjson.dumps(rejected, option=_DUMP), truth.encode(), source.encode(), ability.encode(),
                     orjson.dumps(extra, option=_DUMP, default=str))
            digest.update(b"\x1f".join(parts) + b"\n")
            prefixes.append(int(row_hash[:16], 16))
            sources[source] = sources.get(source, 0) + 1
        last = rows[-1][0]
    return digest.hexdigest(), prefixes, sources


def version_derive(*, source: DatasetVersion, user, drop: Iterable[int], lineage: dict[str, Any], summary: str,
                   action: str = "dataset.derive") -> DatasetVersion:
    """A new version of `source`'s dataset holding its rows except `drop`; ApplicationError when none would stay."""
    drop = sorted({int(i) for i in drop if 0 <= int(i) < source.row_count})
    if not drop:
        raise ApplicationError("Nothing to drop: the new version would equal this one.")
    kept = source.row_count - len(drop)
    if kept <= 0:
        raise ApplicationError("Every row would be dropped: a version needs at least one row.")
    with transaction.atomic():
        dataset = Dataset.objects.select_for_update().get(pk=source.dataset_id)
        number = (dataset.versions.aggregate(m=Max("number"))["m"] or 0) + 1
        lineage = {**lineage, "parent": {"id": source.pk, "number": source.number}, "rows_before": source.row_count,
                   "rows_dropped": len(drop), "rows_kept": kept}
        version = DatasetVersion.objects.create(
            dataset=dataset, number=number, status=VersionStatus.IMPORTING, parent=source, lineage=lineage,
            source_filename=f"v{source.number} {lineage.get('operation', 'derived')}"[:300],
            source_format=source.source_format, detected_shape=source.detected_shape, column_map=source.column_map,
            split_seed=source.split_seed, split_spec=source.split_spec, created_by=user if getattr(user, "pk", None)
            else None)
        _copy_rows(source.pk, version.pk, drop)
        splits = dict(DatasetRow.objects.filter(version=version).values_list("split").annotate(n=Count("id")))
        content_hash, prefixes, sources = _content(version.pk)
        if sum(splits.values()) != kept:  # the copy must hold exactly the kept rows
            raise ApplicationError("The new version's rows did not add up; nothing was written.")
        report = {"derived_from": lineage["parent"], "operation": lineage.get("operation", "derived"),
                  "rows_imported": kept, "rows_read": source.row_count, "bad_rows": 0, "errors": [],
                  "split": {"source": "kept from the parent version", "train": splits.get("train", 0),
                            "val": splits.get("val", 0)},
                  "duplicates": ingest.duplicate_summary(version.pk, prefixes),
                  "data_sources": ingest.data_source_counts(version.pk, counted=sources)}
        DatasetVersion.objects.filter(pk=version.pk).update(
            status=VersionStatus.READY, progress=1.0, row_count=kept, train_count=splits.get("train", 0),
            val_count=splits.get("val", 0), content_hash=content_hash, report=report, updated_at=timezone.now())
        version.refresh_from_db()
        audit(actor=user, action=action, project=dataset.project, obj=version, summary=summary,
              before={"version": source.number, "rows": source.row_count}, after={"version": number, **lineage})
    return version


SUGGEST_AT_MOST = 0.5  # the clean form ticks categories that together drop at most this share of the rows


def suggested_categories(drops: dict[str, list[int]], row_count: int) -> tuple[dict[str, str], int]:
    """Which categories the clean form ticks at first, and the rows they keep: each category with rows, in
    the report's order, unless with those ticked before it it would drop more than half of the version —
    such a category (every pair contaminated, say) is a finding to read, not rows to drop by default.
    Returns ({category: "" when ticked, else why not}, rows kept by the ticked ones)."""
    ticked: set[int] = set()
    notes: dict[str, str] = {}
    for key, rows in drops.items():
        union = ticked | set(rows)
        if not rows:
            notes[key] = "no rows"
        elif len(union) >= row_count:
            notes[key] = (f"not ticked: with the others it covers all {count(row_count, 'row')}, and a version needs "
                          f"at least one")
        elif len(union) > row_count * SUGGEST_AT_MOST:
            notes[key] = (f"not ticked: it would drop more than half of the {count(row_count, 'row')}; "
                          "tick it if you mean it")
        else:
            ticked, notes[key] = union, ""
    return notes, row_count - len(ticked)


def clean_version(*, report: QualityReport, user, categories: Iterable[str]) -> DatasetVersion:
    """Drop the rows of the chosen categories of a ready report into a new version (see the module docstring)."""
    categories = sorted({str(c).strip() for c in categories if str(c).strip()})
    if report.status != ReportStatus.READY:
        raise ApplicationError("The quality report is not ready yet.")
    if report.algorithm != ALGORITHM:
        raise ApplicationError("This report was computed by older rules: recompute it first.")
    if not categories:
        raise ApplicationError("Choose what to drop: " + ", ".join(report.drops) + ".", field="categories")
    unknown = [c for c in categories if c not in report.drops]
    if unknown:
        raise ApplicationError(f"Unknown category '{unknown[0]}': this report offers " + ", ".join(report.drops) + ".",
                               field="categories")
    source = report.version
    dropped = {c: len(report.drops[c]) for c in categories}
    drop = set().union(*(report.drops[c] for c in categories))
    if not drop:
        raise ApplicationError("The chosen categories hold no rows: nothing to drop.", field="categories")
    what = ", ".join(f"{c.replace('_', ' ')} {n:,}" for c, n in dropped.items())
    lineage = {"operation": "cleaned", "quality_report": report.pk, "algorithm": report.algorithm,
               "report_params": report.params, "categories": categories, "dropped": dropped, "summary": what,
               "dropped_indices": sorted(drop)[:1000], "at": timezone.now().isoformat()}
    return version_derive(source=source, user=user, drop=drop, lineage=lineage, action="dataset.clean",
                          summary=f"Cleaned {source} into a new version: dropped {len(drop):,} of "
                                  f"{count(source.row_count, 'row')} ({what}) by quality report {report.pk}")
