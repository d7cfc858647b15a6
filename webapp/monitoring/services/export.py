"""Checkpoint export: a checkpoint zipped as a Hugging Face folder, built on a worker.

A real model's folder takes minutes to merge and zip, longer than a web request should live, so the
page asks for an export (`export_request`), a Celery task builds it (`export_run`), and the checkpoint
table offers the download when it is ready. A zip already built and newer than its checkpoint is
served at once.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from training.rundir import RunDir
from webapp.core.audit import audit
from webapp.core.queue import EXPORT_CHECKPOINT, enqueue
from webapp.core.services import ApplicationError
from webapp.monitoring.models import CheckpointExport, EvaluationStatus
from webapp.monitoring.services.checkpoints import checkpoint_get, checkpoint_is_lora
from webapp.monitoring.services.work import claim
from webapp.runs.models import Checkpoint, RunEvent
from webapp.runs.selectors import checkpoint_on_disk


def export_variant(checkpoint: Checkpoint, merge_lora: bool) -> str:
    if not checkpoint_is_lora(checkpoint):
        return "full"
    return "merged" if merge_lora else "adapter"


def _zip_path(checkpoint: Checkpoint, variant: str) -> Path:
    return RunDir(checkpoint.job.run_dir).export / f"run{checkpoint.job_id}-step{checkpoint.step}-{variant}.zip"


def export_ready(export: CheckpointExport) -> bool:
    """Built, still on disk, and not older than the checkpoint folder it came from."""
    if export.status != EvaluationStatus.SUCCEEDED or not export.path:
        return False
    zip_path, folder = Path(export.path), Path(export.checkpoint.path)
    try:
        return zip_path.stat().st_mtime >= folder.stat().st_mtime
    except OSError:
        return False


def _enqueue(export_id: int, queue: str) -> None:
    enqueue(EXPORT_CHECKPOINT, export_id, queue=queue)


@transaction.atomic
def export_request(*, checkpoint: Checkpoint, user, merge_lora: bool = True) -> CheckpointExport:
    """The export to download: a ready one, the one being built, or a new one queued for a worker."""
    job = checkpoint.job
    checkpoint = checkpoint_get(job=job, step=checkpoint.step)
    if not checkpoint_on_disk(checkpoint):
        raise ApplicationError(f"The checkpoint at step {checkpoint.step} is no longer on disk.")
    variant = export_variant(checkpoint, merge_lora)
    earlier = CheckpointExport.objects.filter(checkpoint=checkpoint, variant=variant).select_related("checkpoint")
    for export in earlier[:5]:
        if export.is_active or export_ready(export):
            return export
    export = CheckpointExport.objects.create(checkpoint=checkpoint, variant=variant, created_by=user)
    audit(actor=user, action="checkpoint.export_request", project=job.project, obj=checkpoint,
          summary=f"Asked for an HF export of run #{job.pk} step {checkpoint.step} ({variant})",
          after={"export": export.pk, "variant": variant})
    # exports read the checkpoint and write next to it: the CPU queue, which sees the run folders
    transaction.on_commit(lambda: _enqueue(export.pk, "cpu"))
    return export


def export_run(*, export_id: int) -> CheckpointExport:
    """Build a queued export (idempotent: it claims the row first); a failure is stored, not raised."""
    export, claimed = claim(CheckpointExport, export_id, "checkpoint__job__base_model")
    if not claimed:
        return export  # another worker has it, or it already finished
    ckpt = export.checkpoint
    try:
        zip_path = build_export(ckpt, export.variant)
    except ApplicationError as exc:
        export.status, export.error = EvaluationStatus.FAILED, exc.message[:2000]
    else:
        export.status, export.path, export.size_bytes = EvaluationStatus.SUCCEEDED, str(zip_path), \
            zip_path.stat().st_size
        audit(actor=export.created_by, action="checkpoint.export", project=ckpt.job.project, obj=ckpt,
              summary=f"Exported run #{ckpt.job_id} step {ckpt.step} as an HF folder ({export.variant})",
              after={"path": str(zip_path), "variant": export.variant, "bytes": export.size_bytes})
    export.finished_at = timezone.now()
    export.save()
    message = (f"Exported step {ckpt.step} ({export.variant})" if not export.error
               else f"Export of step {ckpt.step} failed: {export.error}")
    RunEvent.objects.create(job=ckpt.job, kind="export", step=ckpt.step, message=message[:500],
                            data={"export": export.pk, "variant": export.variant})
    return export


def build_export(checkpoint: Checkpoint, variant: str) -> Path:
    """Write <run_dir>/export/run<job>-step<N>-<variant>.zip (an HF model folder) and return its path."""
    from training.checkpoints import export_hf

    job = checkpoint.job
    folder = Path(checkpoint.path)
    zip_path = _zip_path(checkpoint, variant)
    name = zip_path.stem
    base = job.base_model.path if job.base_model_id and job.base_model and job.base_model.path else None
    try:
        out = export_hf(folder, zip_path.parent / name, merge_lora=variant == "merged", base_model_path=base)
        tmp = shutil.make_archive(str(zip_path.parent / f".tmp-{name}"), "zip", root_dir=out)
    except (FileNotFoundError, RuntimeError, ValueError, OSError) as exc:
        raise ApplicationError(f"Export failed: {exc}") from None
    os.replace(tmp, zip_path)  # a reader never sees half a zip
    return zip_path
