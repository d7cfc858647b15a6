"""Exporting the pairs approved in review (edits and swaps applied) with the datasets app's writers."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from webapp.datasets.exporters import ExportResult, export_version
from webapp.datasets.models import DatasetVersion
from webapp.review.training import training_rows

LABEL = "approved"


def approved_rows(version: DatasetVersion) -> list[dict[str, Any]]:
    """The approved pairs of a version as export rows, each keeping its split (VERL's extra_info wants it)."""
    selection = training_rows(version, include_unreviewed=False)
    rows, splits = selection.rows, selection.splits
    if splits and len(splits) == len(rows):
        return [{**row, "split": split} for row, split in zip(rows, splits, strict=True)]
    return list(rows)


def export_approved(*, version: DatasetVersion, fmt: str, out_path: str | Path, trl_style: str = "auto",
                    user=None) -> ExportResult:
    """Write the approved pairs of `version` to `out_path` in `fmt` (audited like any export)."""
    return export_version(version=version, fmt=fmt, out_path=out_path, rows=approved_rows(version), label=LABEL,
                          trl_style=trl_style, user=user)
