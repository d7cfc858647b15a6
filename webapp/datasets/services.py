"""Dataset imports: one streaming pass that validates, writes and reports.

All-or-nothing by default: rows are written in batches while the file is read; the first bad row
stops the writing (validation goes on, to report every bad row), and at the end a failed import
deletes its rows, its version and a dataset it created. `skip_bad_rows` keeps the good rows and the
report. Uploads are ingested by a Celery task (jobs.tasks.ingest_dataset, sent by name) in a memory-capped child process
(webapp.datasets.isolation); only with DATASET_SYNC_IMPORT_MB > 0 are small ones imported in the request.
"""
from __future__ import annotations

import hashlib
import shutil
import time
from array import array
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.text import get_valid_filename

from webapp.core.audit import audit
from webapp.core.queue import INGEST_DATASET, enqueue
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets import ingest
from webapp.datasets.fastrows import plain_normalizer
from webapp.datasets.models import Dataset, DatasetImport, DatasetKind, DatasetVersion, ImportStatus, VersionStatus
from webapp.datasets.parsing import FileError, Source, check_size, open_source, peek
from webapp.datasets.shapes import Row, RowError, Shape, check_column_map, detect_shape, normalize
from webapp.datasets.splits import parse_split, val_count, val_indices

Progress = Callable[[float, str], None]
REPORT_FIRST_N = 100
PEEK_ROWS = 50
STALE_AFTER = timedelta(minutes=30)
MAPPING_KEPT_FOR = timedelta(days=1)


class ImportFailed(ApplicationError):
    """The import stored nothing; `record` holds the message and the bad-row report."""

    def __init__(self, message: str, *, record: DatasetImport, code: str = "", details: dict | None = None):
        super().__init__(message, field="file")
        self.record = record
        self.code = code
        self.details = details or {}


def sync_limit_bytes() -> int:
    return int(getattr(settings, "DATASET_SYNC_IMPORT_MB", 4) * 1024 * 1024)


def _clean_options(*, name: str, kind: str | None, column_map: dict | None, skip_bad_rows: bool,
                   split: str | int | None, split_seed: int | None) -> dict[str, Any]:
    name = (name or "").strip()
    if not name:
        raise ApplicationError("A dataset needs a name.", field="name")
    if len(name) > 200:
        raise ApplicationError("Keep the name under 200 characters.", field="name")
    if kind and kind not in DatasetKind.values:
        raise ApplicationError(f"Unknown kind '{kind}': use preference or prompts.", field="kind")
    try:
        column_map = check_column_map(column_map)
    except ValueError as exc:
        raise ApplicationError(str(exc), field="column_map") from None
    split = str(split if split not in (None, "") else "10%").strip()
    try:
        parse_split(split)
    except ValueError as exc:
        raise ApplicationError(str(exc), field="split") from None
    try:
        seed = int(split_seed or 0)
    except (TypeError, ValueError):
        raise ApplicationError("The split seed must be a whole number.", field="split_seed") from None
    return {"name": name, "kind": kind or "", "column_map": column_map, "skip_bad_rows": bool(skip_bad_rows),
            "split": split, "split_seed": seed}


def inspect_file(path: str | Path, filename: str, *, kind: str | None, column_map: dict | None
                 ) -> tuple[Source, Shape, dict[str, Any]]:
    """Sniff the format and detect the shape from the first rows; raise FileError."""
    check_size(Path(path).stat().st_size, settings.DATASET_MAX_UPLOAD_MB)
    source = open_source(path, filename)
    records, columns = peek(source, PEEK_ROWS)
    sample = [r.data for r in records if r.data is not None]
    if not sample:
        if not records:
            raise FileError("empty", "The file has no rows, only a header or blank lines.")
        bad = "; ".join(f"row {r.where}: {r.error}" for r in records[:3])
        raise FileError("malformed", f"None of the first {len(records)} rows could be read ({bad}).")
    shape = detect_shape(columns, sample, column_map, kind)
    return source, shape, {"format": source.format, "columns": columns, "shape": shape.name,
                           "shape_label": shape.label, "kind": shape.kind, "field_map": shape.field_map}


class _Tracker:
    """Throttled progress: the import record, the version and the caller's callback."""

    def __init__(self, record: DatasetImport, callback: Progress | None):
        self.record, self.callback, self.version_id, self.last = record, callback, None, 0.0

    def __call__(self, fraction: float, phase: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 0.5:
            return
        self.last = now
        stamp = timezone.now()
        DatasetImport.objects.filter(pk=self.record.pk).update(progress=fraction, phase=phase, updated_at=stamp)
        if self.version_id:
            DatasetVersion.objects.filter(pk=self.version_id).update(progress=fraction, updated_at=stamp)
        if self.callback:
            self.callback(fraction, phase)


class _ErrorLog:
    """Every bad row goes to a JSONL file next to the uploads; the first N stay in the report."""

    def __init__(self, record: DatasetImport):
        self.record, self.count, self.first, self.fh = record, 0, [], None

    def add(self, number: int, line: int | None, field: str, reason: str) -> None:
        entry = {"row": number, "line": line, "field": field, "reason": reason}
        self.count += 1
        if len(self.first) < REPORT_FIRST_N:
            self.first.append(entry)
        if self.fh is None:
            path = reports_dir() / f"import-{self.record.pk}-errors.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = path.open("wb")
            self.record.errors_path = str(path)
        self.fh.write(orjson.dumps(entry) + b"\n")

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def reports_dir() -> Path:
    return Path(settings.MEDIA_ROOT) / "dataset-reports"


def uploads_dir() -> Path:
    return Path(settings.MEDIA_ROOT) / "dataset-uploads"


def dataset_import(*, project, user, name: str, path: str | Path, kind: str | None = None,
                   column_map: dict[str, str] | None = None, skip_bad_rows: bool = False, split: str = "10%",
                   split_seed: int = 0, progress: Progress | None = None, filename: str = "",
                   record: DatasetImport | None = None) -> DatasetVersion:
    """Import `path` as a new version of dataset `name` (created if needed); raise ImportFailed."""
    opts = _clean_options(name=name, kind=kind, column_map=column_map, skip_bad_rows=skip_bad_rows, split=split,
                          split_seed=split_seed)
    path = Path(path)
    if not path.is_file():
        raise ApplicationError(f"There is no file at {path}.", field="file")
    filename = filename or path.name
    if record is None:
        record = DatasetImport.objects.create(project=project, created_by=user, name=opts["name"],
                                              kind=opts["kind"], filename=filename, size_bytes=path.stat().st_size,
                                              options=_stored_options(opts), status=ImportStatus.RUNNING)
    else:
        DatasetImport.objects.filter(pk=record.pk).update(status=ImportStatus.RUNNING, updated_at=timezone.now())
    imports_cleanup_stale()
    tracker = _Tracker(record, progress)
    existing = Dataset.objects.filter(project=project, name=opts["name"]).first()
    try:
        source, shape, inspection = inspect_file(path, filename, kind=opts["kind"] or (existing and existing.kind),
                                                 column_map=opts["column_map"])
    except FileError as exc:
        raise _fail(record, user, exc.message, code=exc.code, details=exc.details) from None
    record.inspection = inspection
    version, created = _new_version(project, user, opts, shape, source, record)
    tracker.version_id = version.pk
    try:
        return _ingest(version, created, source, shape, opts, record, tracker, user)
    except FileError as exc:
        _discard(version, created)
        raise _fail(record, user, exc.message, code=exc.code, details=exc.details) from None
    except ImportFailed:
        raise
    except BaseException as exc:
        _discard(version, created)
        _fail(record, user, f"The import stopped unexpectedly: {exc.__class__.__name__}: {exc}", code="internal")
        raise


def _stored_options(opts: dict[str, Any]) -> dict[str, Any]:
    return {k: opts[k] for k in ("column_map", "skip_bad_rows", "split", "split_seed")}


def _new_version(project, user, opts: dict, shape: Shape, source: Source, record: DatasetImport):
    with transaction.atomic():
        dataset = Dataset.objects.select_for_update().filter(project=project, name=opts["name"]).first()
        created = False
        if dataset is None:
            try:
                with transaction.atomic():
                    dataset = Dataset.objects.create(project=project, name=opts["name"], kind=shape.kind,
                                                     created_by=user)
                    created = True
            except IntegrityError:  # created by a concurrent import a moment ago
                dataset = Dataset.objects.select_for_update().get(project=project, name=opts["name"])
        version = None
        if dataset.kind == shape.kind:
            number = (dataset.versions.aggregate(m=Max("number"))["m"] or 0) + 1
            version = DatasetVersion.objects.create(
                dataset=dataset, number=number, status=VersionStatus.IMPORTING,
                source_filename=record.filename[:300], source_format=source.format, detected_shape=shape.name,
                column_map=shape.field_map, split_seed=opts["split_seed"], split_spec=opts["split"],
                created_by=user)
    if version is None:
        raise _fail(record, user, f"The dataset '{dataset.name}' holds {dataset.get_kind_display().lower()} but "
                                  f"this file holds {DatasetKind(shape.kind).label.lower()}. Import it under "
                                  "another name.", code="wrong_kind")
    return version, created


def _ingest(version: DatasetVersion, created: bool, source: Source, shape: Shape, opts: dict,
            record: DatasetImport, tracker: _Tracker, user) -> DatasetVersion:
    errors = _ErrorLog(record)
    content = hashlib.sha256()
    skip = opts["skip_bad_rows"]
    max_chars = settings.DATASET_MAX_TEXT_CHARS
    file_split = "split" in shape.field_map
    # When the row count is known up front, rows get their seeded split as they are written; a
    # wrong guess (blank lines, skipped rows) is corrected after the pass.
    planned = None if file_split else source.count_hint()
    val_set = _planned_val(opts, planned)
    sources: dict[str, int] | None = {}
    prefixes = array("Q")  # 64 bits of each row hash: duplicates are found from these at the end
    read = good = 0
    counts = {"train": 0, "val": 0}
    plain = plain_normalizer(shape, max_chars)  # plain rows skip the checks only odd rows need
    tracker(0.0, "reading", force=True)
    try:
        with ingest.fast_commits(), ingest.RowWriter(version.pk) as writer:
            for rec in source:
                read += 1
                row: Row | None = None
                if rec.error:
                    errors.add(rec.number, rec.line, "", rec.error)
                else:
                    row = plain(rec.data) if plain is not None else None
                    if row is None:
                        try:
                            row = normalize(rec.data, shape, max_chars)
                        except RowError as exc:
                            errors.add(rec.number, rec.line, exc.field, exc.reason)
                if errors.count and not skip:
                    writer.discard()  # all-or-nothing: keep reading only to report every bad row
                elif row is not None:
                    split = row.split or ("val" if good in val_set else "train")
                    writer.add(row, good, rec.where, split)
                    content.update(row.canonical + b"\n")
                    prefixes.append(int(row.row_hash[:16], 16))
                    counts[split] += 1
                    good += 1
                    if sources is not None:
                        sources[row.data_source] = sources.get(row.data_source, 0) + 1
                        if len(sources) > 10_000:
                            sources = None  # too many to tally here: the database counts them
                if not read & 1023:  # the tracker writes twice a second at most; a clock read per row costs more
                    tracker(0.95 * source.fraction_read, "reading")
            writer.flush()
    finally:
        errors.close()
    report: dict[str, Any] = {"format": source.format, "shape": shape.name, "kind": shape.kind, "rows_read": read,
                              "bad_rows": errors.count, "errors": errors.first,
                              "errors_truncated": errors.count > len(errors.first), "column_map": shape.field_map}
    if errors.count and not skip:
        _discard(version, created)
        raise _fail(record, user, f"{errors.count:,} of {count(read, 'row')} are invalid, so nothing was imported. "
                                  "Fix them or tick “skip bad rows” to import the other rows.", code="bad_rows",
                    report=report)
    if good == 0:
        _discard(version, created)
        raise _fail(record, user, "No valid rows: nothing was imported.", code="bad_rows", report=report)
    tracker(0.96, "splitting", force=True)
    if file_split:
        report["split"] = {"source": "file column", **counts}
    else:
        try:
            k = val_count(opts["split"], good)
        except ValueError as exc:
            _discard(version, created)
            raise _fail(record, user, str(exc), code="split", report=report) from None
        if planned != good:
            ingest.reset_split(version.pk)
            ingest.mark_val(version.pk, val_indices(good, k, opts["split_seed"]))
        counts = {"train": good - k, "val": k}
        report["split"] = {"source": "seeded", "spec": opts["split"], "seed": opts["split_seed"], **counts}
    tracker(0.98, "finishing", force=True)
    report.update(rows_imported=good, skipped=errors.count,
                  duplicates=ingest.duplicate_summary(version.pk, prefixes),
                  data_sources=ingest.data_source_counts(version.pk, counted=sources))
    _make_ready(record, user, version, good=good, skipped=errors.count, counts=counts,
                content_hash=content.hexdigest(), report=report)
    tracker(1.0, "done", force=True)
    return version


def _make_ready(record: DatasetImport, user, version: DatasetVersion, *, good: int, skipped: int, counts: dict,
                content_hash: str, report: dict) -> None:
    """Mark the version ready and the import succeeded, audited, in one transaction; or, when the version was
    discarded while the import ran (the stale-import sweep), delete its rows: no row may outlive its version."""
    with transaction.atomic():
        finished = DatasetVersion.objects.filter(pk=version.pk, status=VersionStatus.IMPORTING).update(
            status=VersionStatus.READY, progress=1.0, row_count=good, train_count=counts["train"],
            val_count=counts["val"], content_hash=content_hash, report=report, updated_at=timezone.now())
        if finished:
            version.refresh_from_db()
            record.status, record.progress, record.phase, record.version = ImportStatus.SUCCEEDED, 1.0, "done", version
            record.report, record.error = report, ""
            record.save()
            audit(actor=user, action="dataset.import", project=version.project, obj=version,
                  summary=f"Imported {count(good, 'row')} into {version}" + (f" ({count(skipped, 'bad row')} skipped)"
                                                                     if skipped else ""),
                  after={"rows": good, "content_hash": version.content_hash, "file": record.filename})
            return
    ingest.delete_rows(version.pk)
    raise _fail(record, user, "This import was stopped while it ran (its version was discarded), so nothing was "
                              "imported. Upload the file again.", code="discarded", report=report)


def _planned_val(opts: dict, planned: int | None) -> set[int]:
    if not planned:
        return set()
    try:
        return set(val_indices(planned, val_count(opts["split"], planned), opts["split_seed"]))
    except ValueError:
        return set()  # reported after the pass, against the real row count


def _fail(record: DatasetImport, user, message: str, *, code: str, details: dict | None = None,
          report: dict | None = None) -> ImportFailed:
    record.status, record.error, record.phase = ImportStatus.FAILED, message, "failed"
    record.version = None
    if report is not None:
        record.report = report
    if details:
        record.inspection = {**record.inspection, **details}
    record.save()
    audit(actor=user, action="dataset.import_failed", project=record.project, obj=record,
          summary=f"Import of {record.filename} into {record.name} failed: {message}")
    return ImportFailed(message, record=record, code=code, details=details)


def _discard(version: DatasetVersion, dataset_created: bool) -> None:
    """Remove every trace of a failed import: its rows, its version, and a dataset it created."""
    ingest.delete_rows(version.pk)
    dataset = version.dataset
    version.delete()
    if dataset_created and not dataset.versions.exists():
        dataset.delete()


def imports_cleanup_stale() -> None:
    """Discard imports whose process died (no progress for STALE_AFTER): no half version stays."""
    cutoff = timezone.now() - STALE_AFTER
    for version in DatasetVersion.objects.filter(status=VersionStatus.IMPORTING, updated_at__lt=cutoff):
        _discard(version, dataset_created=version.number == 1)
    DatasetImport.objects.filter(status=ImportStatus.RUNNING, updated_at__lt=cutoff).update(
        status=ImportStatus.FAILED, phase="failed", updated_at=timezone.now(),
        error="The import stopped unexpectedly (its worker went away); nothing was imported. Upload the file again.")
    # Uploads left waiting for a column mapping do not keep their file forever.
    waiting = DatasetImport.objects.filter(status=ImportStatus.NEEDS_MAPPING,
                                           updated_at__lt=timezone.now() - MAPPING_KEPT_FOR)
    for record in waiting:
        _remove_upload(record)
    waiting.update(status=ImportStatus.FAILED, phase="failed", updated_at=timezone.now(),
                   error="Nobody mapped the columns within a day, so the uploaded file was removed. Upload it again.")


# ---- uploads from the browser and the API ------------------------------------------------------------

def import_upload(*, project, user, uploaded_file, name: str, kind: str | None = None,
                  column_map: dict | None = None, skip_bad_rows: bool = False, split: str = "10%",
                  split_seed: int = 0) -> DatasetImport:
    """Keep an uploaded file and start its import (now if small, else on a worker)."""
    opts = _clean_options(name=name, kind=kind, column_map=column_map, skip_bad_rows=skip_bad_rows, split=split,
                          split_seed=split_seed)
    if uploaded_file is None:
        raise ApplicationError("Choose a file to upload.", field="file")
    try:
        check_size(uploaded_file.size, settings.DATASET_MAX_UPLOAD_MB)
    except FileError as exc:
        raise ApplicationError(exc.message, field="file") from None
    try:
        filename = get_valid_filename(Path(uploaded_file.name or "upload").name)
    except SuspiciousFileOperation:  # a name like ".." leaves nothing usable
        filename = "upload"
    record = DatasetImport.objects.create(project=project, created_by=user, name=opts["name"], kind=opts["kind"],
                                          filename=filename[:300], size_bytes=uploaded_file.size,
                                          options=_stored_options(opts), status=ImportStatus.QUEUED)
    target = uploads_dir() / str(record.pk) / filename
    target.parent.mkdir(parents=True, exist_ok=True)
    if hasattr(uploaded_file, "temporary_file_path"):
        shutil.move(uploaded_file.temporary_file_path(), target)  # big uploads: no second copy
    else:
        with target.open("wb") as fh:
            for chunk in uploaded_file.chunks():
                fh.write(chunk)
    record.upload_path = str(target)
    record.save(update_fields=["upload_path", "updated_at"])
    return import_launch(record=record, user=user)


def import_launch(*, record: DatasetImport, user) -> DatasetImport:
    """Check the file and its columns, then import now (small files) or queue the Celery task."""
    opts = record.options
    existing = Dataset.objects.filter(project=record.project, name=record.name).first()
    try:
        _, _, inspection = inspect_file(record.upload_path, record.filename,
                                        kind=record.kind or (existing and existing.kind),
                                        column_map=opts.get("column_map"))
    except FileError as exc:
        if exc.code == "needs_mapping":
            record.status, record.error, record.inspection = ImportStatus.NEEDS_MAPPING, exc.message, exc.details
            record.save()
            return record
        _fail(record, user, exc.message, code=exc.code, details=exc.details)
        _remove_upload(record)
        return record
    record.inspection, record.status, record.error = inspection, ImportStatus.QUEUED, ""
    record.save()
    if record.size_bytes <= sync_limit_bytes():
        import_run(import_id=record.pk)
    else:
        transaction.on_commit(lambda: enqueue(INGEST_DATASET, record.pk))
    record.refresh_from_db()
    return record


def import_set_mapping(*, record: DatasetImport, user, column_map: dict, kind: str | None = None,
                       skip_bad_rows: bool | None = None, split: str | None = None,
                       split_seed: int | None = None) -> DatasetImport:
    """Resume an upload that waited for a column mapping."""
    if record.status != ImportStatus.NEEDS_MAPPING:
        raise ApplicationError("This import is not waiting for a column mapping.")
    old = record.options
    opts = _clean_options(name=record.name, kind=kind if kind is not None else record.kind, column_map=column_map,
                          skip_bad_rows=old.get("skip_bad_rows") if skip_bad_rows is None else skip_bad_rows,
                          split=split or old.get("split"),
                          split_seed=old.get("split_seed") if split_seed is None else split_seed)
    record.kind, record.options = opts["kind"], _stored_options(opts)
    record.save(update_fields=["kind", "options", "updated_at"])
    return import_launch(record=record, user=user)


def import_run(*, import_id: int) -> DatasetVersion | None:
    """Run a queued import (the Celery task's body); a second delivery of the same task does nothing."""
    claimed = DatasetImport.objects.filter(pk=import_id, status=ImportStatus.QUEUED).update(
        status=ImportStatus.RUNNING, updated_at=timezone.now())
    if not claimed:
        return None
    record = DatasetImport.objects.select_related("project", "created_by").get(pk=import_id)
    opts = record.options
    try:
        return dataset_import(project=record.project, user=record.created_by, name=record.name,
                              path=record.upload_path, kind=record.kind or None, column_map=opts.get("column_map"),
                              skip_bad_rows=opts.get("skip_bad_rows", False), split=opts.get("split", "10%"),
                              split_seed=opts.get("split_seed", 0), filename=record.filename, record=record)
    except ApplicationError as exc:
        if not isinstance(exc, ImportFailed):
            _fail(record, record.created_by, exc.message, code="invalid")
        return None
    finally:
        _remove_upload(record)


def _remove_upload(record: DatasetImport) -> None:
    if not record.upload_path:
        return
    path = Path(record.upload_path)
    if path.parent.parent == uploads_dir():  # our uploads/<id>/ folder
        shutil.rmtree(path.parent, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    record.upload_path = ""
    DatasetImport.objects.filter(pk=record.pk).update(upload_path="")
