"""Pinning a job's data: which rows of a dataset version it trains on, and their run-directory form.

At job creation the selection comes from `webapp.review.selectors.training_rows` (review decisions
decide what is included) and is recorded as row-id ranges in `job.data_manifest`; at launch
exactly those rows are written to data/train.jsonl and data/val.jsonl.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from webapp.datasets.models import DatasetKind, DatasetRow, DatasetVersion
from webapp.review.render import response_text
from webapp.review.selectors import training_rows

log = logging.getLogger(__name__)


@dataclass
class Pinned:
    rows: list[dict]  # run-directory rows (training_rows' format), in row order
    manifest: dict[str, Any]
    splits: list[str] = field(default_factory=list)


def id_ranges(ids: Iterable[int]) -> list[list[int]]:
    """[1,2,3,7,8] -> [[1,3],[7,8]]: compact enough for a million rows in a JSON field."""
    out: list[list[int]] = []
    for i in sorted(set(ids)):
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def expand_ranges(ranges: list[list[int]]) -> list[int]:
    return [i for a, b in ranges for i in range(a, b + 1)]


def _selection(version: DatasetVersion, include_unreviewed: bool):
    """The review app's selection plus the row id of each selected row."""
    selection = training_rows(version, include_unreviewed=include_unreviewed)
    ids = expand_ranges(selection.manifest["row_id_ranges"]["included"])
    if len(ids) != len(selection.rows):
        raise RuntimeError(f"the review selection of {version} lists {len(ids)} ids for {len(selection.rows)} rows")
    # training_rows walks rows by index; ids grow with the index (rows are bulk-created in order).
    order = dict(DatasetRow.objects.filter(pk__in=ids).values_list("pk", "index"))
    ids = sorted(ids, key=lambda i: order.get(i, i))
    return selection, ids


def select_rows(version: DatasetVersion, include_unreviewed: bool = False) -> Pinned:
    """Which rows a job may train on (review decisions decide), as a manifest that pins them by id."""
    selection, ids = _selection(version, include_unreviewed)
    dataset = version.dataset
    n_val = sum(1 for s in selection.splits if s == "val")
    manifest = {
        "dataset": {"id": dataset.pk, "name": dataset.name, "kind": dataset.kind, "version_id": version.pk,
                    "version": version.number, "content_hash": version.content_hash},
        "include_unreviewed": include_unreviewed,
        "counts": {"included": len(selection.rows), "train": len(selection.rows) - n_val, "val": n_val,
                   "excluded": sum(selection.excluded.values())},
        "included_ranges": id_ranges(ids), "excluded_reasons": dict(selection.excluded),
        "review": {k: v for k, v in selection.manifest.items() if k != "row_id_ranges"}
        | {"row_id_ranges": {k: v for k, v in selection.manifest.get("row_id_ranges", {}).items() if k != "included"}},
    }
    return Pinned(rows=list(selection.rows), manifest=manifest, splits=list(selection.splits))


def to_record(row: DatasetRow, dataset_kind: str) -> dict[str, Any]:
    """A stored row in the run-directory format (used when a pinned row left the review selection)."""
    if dataset_kind == DatasetKind.PROMPTS:
        return {"prompt": row.prompt, "ground_truth": row.ground_truth, "data_source": row.data_source,
                "ability": row.ability, "extra_info": row.extra_info or {},
                "reference": response_text(row.chosen) if row.chosen else None}
    return {"prompt": row.prompt, "chosen": row.chosen, "rejected": row.rejected, "data_source": row.data_source}


def pinned_records(version, manifest: dict | None, job_id: int) -> tuple[list[dict], list[dict]]:
    """Exactly the rows of job `job_id` pinned at creation (its data manifest), in the run-directory format:
    (train, val).

    The review app's current selection supplies each row with its edits and swaps applied; a pinned
    row that the selection no longer includes (a decision changed since) is taken as stored.
    """
    manifest = manifest or {}
    pinned = expand_ranges(manifest.get("included_ranges") or [])
    selection, ids = _selection(version, bool(manifest.get("include_unreviewed")))
    fresh = {i: (row, split) for i, row, split in zip(ids, selection.rows, selection.splits, strict=True)}
    missing = [i for i in pinned if i not in fresh]
    if missing:
        log.warning("job %s: %d pinned rows left the review selection; using them as stored", job_id, len(missing))
        kind = version.dataset.kind
        for row in DatasetRow.objects.filter(pk__in=missing):
            fresh[row.pk] = (to_record(row, kind), row.split)
    order = dict(DatasetRow.objects.filter(pk__in=pinned).values_list("pk", "index"))
    train, val = [], []
    for i in sorted(pinned, key=lambda i: order.get(i, i)):
        if i not in fresh:
            raise RuntimeError(f"pinned row {i} of job {job_id} no longer exists")
        row, split = fresh[i]
        (val if split == "val" else train).append(row)
    return train, val
