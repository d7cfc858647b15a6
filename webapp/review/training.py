"""What a training job (or an "approved only" export) takes from a dataset version, and why.

Preference versions: approved pairs with swaps and the latest edits applied; rejected, flagged and
conflicting pairs are left out, and unreviewed ones unless the launcher asks for them.
Prompt-set versions are not reviewed: every row goes in.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from django.utils import timezone

from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetKind, DatasetRow, DatasetVersion, VersionStatus, restore_stored
from webapp.review.models import ResponseEdit, State
from webapp.review.render import apply_edit, response_text

EXCLUSION_REASONS = (State.REJECTED, State.FLAGGED, State.CONFLICT, State.UNREVIEWED)


@dataclass
class TrainingSelection:
    rows: list[dict]  # run-directory rows (docs/run-directory.md), in row order
    included: int
    excluded: dict[str, int]  # reason -> count
    manifest: dict  # JSON-ready: row id ranges per outcome, counts, what was applied
    splits: list[str] = field(default_factory=list)  # "train"/"val" of each row in `rows`

    @property
    def train_rows(self) -> list[dict]:
        return [r for r, s in zip(self.rows, self.splits, strict=True) if s == "train"]

    @property
    def val_rows(self) -> list[dict]:
        return [r for r, s in zip(self.rows, self.splits, strict=True) if s == "val"]


class _Ranges:
    """Row ids as [first, last] ranges: a 100k-row manifest stays small when ids are contiguous."""

    def __init__(self) -> None:
        self.ranges: list[list[int]] = []

    def add(self, row_id: int) -> None:
        if self.ranges and self.ranges[-1][1] + 1 == row_id:
            self.ranges[-1][1] = row_id
        else:
            self.ranges.append([row_id, row_id])

    def result(self) -> list[list[int]]:
        merged: list[list[int]] = []
        for first, last in sorted(self.ranges):
            if merged and merged[-1][1] + 1 >= first:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        return merged


def expand_ranges(ranges: list[list[int]]) -> Iterator[int]:
    """The row ids of a manifest's ranges."""
    for first, last in ranges:
        yield from range(first, last + 1)


def _latest_edits(version: DatasetVersion) -> dict[tuple[int, str], str]:
    edits: dict[tuple[int, str], str] = {}
    for row_id, side, text in (ResponseEdit.objects.filter(version=version).order_by("row_id", "side", "revision")
                               .values_list("row_id", "side", "text").iterator(chunk_size=2000)):
        edits[(row_id, side)] = text
    return edits


def training_rows(version: DatasetVersion, *, include_unreviewed: bool = False) -> TrainingSelection:
    """The rows a job trains on, with counts and a manifest of what was included, excluded and why."""
    if version.status != VersionStatus.READY:
        raise ApplicationError(f"{version} is not ready (status: {version.status}).")
    if version.dataset.kind == DatasetKind.PROMPTS:
        return _prompt_rows(version)
    edits = _latest_edits(version)
    rows: list[dict] = []
    splits: list[str] = []
    excluded = dict.fromkeys(EXCLUSION_REASONS, 0)
    ranges = {name: _Ranges() for name in ("included", *EXCLUSION_REASONS, "swapped", "edited")}
    included_unreviewed = 0
    fields = ("id", "split", "prompt", "chosen", "rejected", "data_source", "pair_state__state",
              "pair_state__final_swap", "prompt_text", "chosen_text", "rejected_text")
    for r in (DatasetRow.objects.filter(version=version).order_by("index").values(*fields)
              .iterator(chunk_size=2000)):
        restore_stored(r)
        state = r["pair_state__state"] or State.UNREVIEWED  # no state row yet: nobody reviewed it
        if state != State.APPROVED and not (state == State.UNREVIEWED and include_unreviewed):
            excluded[state] += 1
            ranges[state].add(r["id"])
            continue
        chosen, rejected = r["chosen"], r["rejected"]
        edited = False
        for side in ("chosen", "rejected"):
            text = edits.get((r["id"], side))
            if text is not None and text != response_text(r[side]):
                edited = True
                if side == "chosen":
                    chosen = apply_edit(chosen, text)
                else:
                    rejected = apply_edit(rejected, text)
        if edited:
            ranges["edited"].add(r["id"])
        if state == State.APPROVED and r["pair_state__final_swap"]:
            chosen, rejected = rejected, chosen
            ranges["swapped"].add(r["id"])
        if state == State.UNREVIEWED:
            included_unreviewed += 1
        rows.append({"prompt": r["prompt"], "chosen": chosen, "rejected": rejected, "data_source": r["data_source"]})
        splits.append(r["split"])
        ranges["included"].add(r["id"])
    excluded = {reason: n for reason, n in excluded.items() if n}
    manifest = {
        "version_id": version.pk, "dataset_id": version.dataset_id, "dataset": version.dataset.name,
        "version": version.number, "kind": version.dataset.kind, "include_unreviewed": include_unreviewed,
        "included": len(rows), "included_unreviewed": included_unreviewed, "excluded": excluded,
        "swapped": sum(b - a + 1 for a, b in ranges["swapped"].result()),
        "edited": sum(b - a + 1 for a, b in ranges["edited"].result()),
        "row_id_ranges": {name: rg.result() for name, rg in ranges.items()},
        "created_at": timezone.now().isoformat(),
    }
    return TrainingSelection(rows=rows, included=len(rows), excluded=excluded, manifest=manifest, splits=splits)


def _prompt_rows(version: DatasetVersion) -> TrainingSelection:
    rows: list[dict] = []
    splits: list[str] = []
    ranges = _Ranges()
    fields = ("id", "split", "prompt", "ground_truth", "data_source", "ability", "extra_info", "chosen",
              "prompt_text", "chosen_text")
    for r in DatasetRow.objects.filter(version=version).order_by("index").values(*fields).iterator(chunk_size=2000):
        restore_stored(r)
        # A prompt set has no chosen response as a rule; when it carries one it is the win-rate reference.
        reference = response_text(r["chosen"]) if r["chosen"] else None
        rows.append({"prompt": r["prompt"], "ground_truth": r["ground_truth"], "data_source": r["data_source"],
                     "ability": r["ability"], "extra_info": r["extra_info"] or {}, "reference": reference})
        splits.append(r["split"])
        ranges.add(r["id"])
    manifest = {
        "version_id": version.pk, "dataset_id": version.dataset_id, "dataset": version.dataset.name,
        "version": version.number, "kind": version.dataset.kind, "include_unreviewed": True,
        "included": len(rows), "excluded": {}, "row_id_ranges": {"included": ranges.result()},
        "created_at": timezone.now().isoformat(),
    }
    return TrainingSelection(rows=rows, included=len(rows), excluded={}, manifest=manifest, splits=splits)
