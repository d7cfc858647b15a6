"""The diagnostic bundle: one zip with what a maintainer asks for when a run hangs or blows up.

The job spec, the resolved configuration (the local trainer's settings, or VERL's override list and Hydra's
composed config), package versions and the app's version, every attempt's log (its last LOG_TAIL_MB), launch
and exit files, stack dumps, the metrics as CSV, the run's history with the guard's trips and state, the last N
steps' rollout samples, the reward versions' code and the data versions' fingerprints. Built on a worker
(`bundle_request` → task → `bundle_run`), written file by file into a temporary zip that is renamed into place,
within MAX_MB. Every text that goes in passes `training.diagnostics.Scrubber`: the app's secret key, database and
broker passwords, API tokens, hook secrets and URLs, and every secret-named environment value are replaced.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from training import rollouts
from training.diagnostics import Scrubber, app_version, package_versions, saved_stacks
from training.rundir import RunDir, read_json
from webapp.core.audit import audit
from webapp.core.queue import BUILD_BUNDLE, enqueue
from webapp.core.services import ApplicationError
from webapp.monitoring.models import DiagnosticBundle, EvaluationStatus, GuardRulesRecord
from webapp.monitoring.services.work import claim
from webapp.notifications.models import Hook
from webapp.runs.models import Job, MetricPoint, RunEvent
from webapp.runs.services.spec import reward_filename

LOG_TAIL_MB = 20  # of each attempt's log: the end is what explains a hang
SAMPLE_FILE_MB = 20  # of each step's rollout dump
MAX_MB = 512  # the whole bundle
MAX_SAMPLE_STEPS = 50
GUARD_KINDS = ("guard_rule", "stalled", "stall_cleared")


# -- what is secret ----------------------------------------------------------------------------

def _url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def _url_secrets(url: str) -> list[str]:
    """A hook URL's secret parts: its path and query, and each long path segment (a Slack webhook's token)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    return [parts.path, parts.query, *(seg for seg in parts.path.split("/") if len(seg) >= 12)]


def bundle_scrubber() -> Scrubber:
    """Every secret this installation knows, plus the secret-named values of the environment."""
    known: list[Any] = [settings.SECRET_KEY, getattr(settings, "EMAIL_HOST_PASSWORD", "")]
    known += [db.get("PASSWORD") for db in settings.DATABASES.values()]
    for url in (getattr(settings, "REDIS_URL", ""), getattr(settings, "CELERY_BROKER_URL", ""),
                os.environ.get("DATABASE_URL", "")):
        known.append(_url_password(str(url or "")))
    known += list(Token.objects.values_list("key", flat=True))
    for secret, url in Hook.objects.values_list("secret", "url"):
        known += [secret, url, *_url_secrets(url)]
    return Scrubber.from_environment(known)


# -- requests ----------------------------------------------------------------------------------

def bundle_request(*, job: Job, user, sample_steps: int = 5) -> DiagnosticBundle:
    """Queue a new bundle (a worker builds it); one being built already is returned instead."""
    if not job.run_dir:
        raise ApplicationError("This run has no run directory yet: there is nothing to bundle.")
    if not 0 <= int(sample_steps) <= MAX_SAMPLE_STEPS:
        raise ApplicationError(f"The number of steps of samples must be between 0 and {MAX_SAMPLE_STEPS}.")
    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job.pk).first()  # two clicks at once make one bundle
        active = DiagnosticBundle.objects.filter(job=job, status__in=(EvaluationStatus.QUEUED,
                                                                      EvaluationStatus.RUNNING)).first()
        if active is not None:
            return active
        bundle = DiagnosticBundle.objects.create(job=job, sample_steps=int(sample_steps), created_by=user)
        audit(actor=user, action="job.bundle_request", project=job.project, obj=job,
              summary=f"Asked for a diagnostic bundle of run #{job.pk}", after={"bundle": bundle.pk})
        transaction.on_commit(lambda: enqueue(BUILD_BUNDLE, bundle.pk, queue="cpu"))
    return bundle


def bundle_run(*, bundle_id: int) -> DiagnosticBundle:
    """Build a queued bundle (claimed once: a redelivered task does nothing); a failure is stored, not raised."""
    bundle, claimed = claim(DiagnosticBundle, bundle_id, "job", "job__project")
    if not claimed:
        return bundle
    try:
        built = build_bundle(bundle.job, sample_steps=bundle.sample_steps, name=f"bundle-{bundle.pk}")
    except (ApplicationError, OSError) as exc:
        bundle.status, bundle.error = EvaluationStatus.FAILED, str(getattr(exc, "message", exc))[:2000]
    else:
        bundle.status, bundle.path, bundle.size_bytes = EvaluationStatus.SUCCEEDED, str(built.path), built.size
        bundle.files, bundle.left_out = built.files, built.left_out
    bundle.finished_at = timezone.now()
    bundle.save()
    return bundle


def bundle_file(bundle: DiagnosticBundle) -> Path | None:
    """The built zip, when it is still on disk."""
    if bundle.status != EvaluationStatus.SUCCEEDED or not bundle.path:
        return None
    path = Path(bundle.path)
    return path if path.is_file() else None


# -- building ----------------------------------------------------------------------------------

class _Zip:
    """Adds scrubbed files to a zip within a byte budget, remembering what went in and what was left out."""

    def __init__(self, zf: zipfile.ZipFile, scrub: Scrubber, budget: int) -> None:
        self.zf, self.scrub, self.left = zf, scrub, budget
        self.files: list[dict[str, Any]] = []
        self.left_out: list[dict[str, str]] = []

    def text(self, name: str, text: str) -> None:
        data = self.scrub.text(text).encode("utf-8")
        if len(data) > self.left:
            self.left_out.append({"name": name, "why": f"the bundle's {MAX_MB} MB were used up"})
            return
        self.zf.writestr(name, data)
        self.left -= len(data)
        self.files.append({"name": name, "bytes": len(data)})

    def json(self, name: str, value: Any) -> None:
        self.text(name, json.dumps(self.scrub.value(value), indent=1, ensure_ascii=False, default=str) + "\n")

    def file(self, name: str, path: Path, tail_mb: float | None = None) -> None:
        """A text file on disk, line by line through the scrubber; only its last `tail_mb` when it is bigger."""
        try:
            size = path.stat().st_size
            fh = path.open("rb")
        except OSError:
            return
        cap = int(tail_mb * 1024 * 1024) if tail_mb else size
        with fh:
            if size > cap:
                fh.seek(size - cap)
                fh.readline()  # the first line is probably cut
                self.left_out.append({"name": name, "why": f"only its last {tail_mb:g} MB of {size / 2**20:.0f} MB"})
            if min(size, cap) > self.left:
                self.left_out.append({"name": name, "why": f"the bundle's {MAX_MB} MB were used up"})
                return
            written = 0
            with self.zf.open(name, "w", force_zip64=True) as out:
                for line in fh:
                    data = self.scrub.text(line.decode("utf-8", errors="replace")).encode("utf-8")
                    out.write(data)
                    written += len(data)
        self.left -= written
        self.files.append({"name": name, "bytes": written})


class Built:
    def __init__(self, path: Path, files: list, left_out: list) -> None:
        self.path, self.files, self.left_out = path, files, left_out
        self.size = path.stat().st_size


def build_bundle(job: Job, *, sample_steps: int = 5, name: str = "bundle") -> Built:
    """Write `<run_dir>/diagnostics/<name>.zip` and return it with its file list."""
    run = RunDir(job.run_dir)
    final = run.diagnostics / f"{name}.zip"
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp-{final.name}")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        z = _Zip(zf, bundle_scrubber(), MAX_MB * 1024 * 1024)
        _spec_and_config(z, job, run)
        _attempts(z, run)
        _metrics_csv(z, job)
        _history(z, job)
        _samples(z, run, sample_steps)
        _rewards(z, job, run)
        _data(z, job, run)
        z.json("MANIFEST.json", {"run": job.pk, "project": job.project.slug, "built_at": timezone.now().isoformat(),
                                 "files": z.files, "left_out": z.left_out})
    os.replace(tmp, final)  # a reader never sees half a zip
    return Built(final, z.files, z.left_out)


def _spec_and_config(z: _Zip, job: Job, run: RunDir) -> None:
    spec = read_json(run.job_spec)
    if spec is not None:
        z.json("job.json", spec)
    z.json("config/settings.json", {"kind": job.kind, "backend": job.backend, "preset": job.preset,
                                    "config": job.config, "reward_spec": job.reward_spec})
    z.json("versions.json", {"packages": package_versions(), "app": app_version(), "host": os.uname().nodename})
    if job.is_attached:  # launched outside the app: where it lives, what was found, and its own Hydra config
        root, layout = Path(job.attached_dir), (job.attached or {}).get("layout") or {}
        z.json("attached.json", {"folder": str(root), "layout": layout})
        hydra = root / layout["hydra"] if layout.get("hydra") else None
        if hydra is not None and hydra.resolve().is_relative_to(root):
            z.file("attached/hydra/config.yaml", hydra)


def _attempts(z: _Zip, run: RunDir) -> None:
    for adir in run.attempts():
        k = adir.number
        z.file(f"attempts/{k}/log.txt", adir.log, tail_mb=LOG_TAIL_MB)
        for path in (adir.launch, adir.exit):
            data = read_json(path)
            if data is not None:
                z.json(f"attempts/{k}/{path.name}", data)
        if adir.verl_overrides.is_file():  # VERL: the resolved override list
            z.file(f"attempts/{k}/{adir.verl_overrides.name}", adir.verl_overrides)
        hydra = adir.hydra / ".hydra"  # VERL: Hydra's composed configuration
        for yaml in sorted(hydra.glob("*.yaml")) if hydra.is_dir() else []:
            z.file(f"attempts/{k}/hydra/{yaml.name}", yaml)
        for dump in saved_stacks(adir.path):
            z.file(f"attempts/{k}/stacks/{dump.name}", dump)


def _metrics_csv(z: _Zip, job: Job) -> None:
    """One row per step, one column per metric (streamed from the database, step by step)."""
    names = sorted(set(MetricPoint.objects.filter(job=job).values_list("name", flat=True)))
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["step", *names])
    column = {n: i for i, n in enumerate(names)}
    with z.zf.open("metrics.csv", "w", force_zip64=True) as out:
        row: list[Any] | None = None
        step = None
        for s, name, value in MetricPoint.objects.filter(job=job).order_by("step", "name").values_list(
                "step", "name", "value").iterator(chunk_size=5000):
            if s != step:
                if row is not None:
                    writer.writerow([step, *row])
                step, row = s, [""] * len(names)
            row[column[name]] = "" if value is None else repr(value)
            if buf.tell() > 1 << 20:
                out.write(buf.getvalue().encode())
                buf.seek(0)
                buf.truncate()
        if row is not None:
            writer.writerow([step, *row])
        out.write(buf.getvalue().encode())
    size = z.zf.getinfo("metrics.csv").file_size
    z.left -= size
    z.files.append({"name": "metrics.csv", "bytes": size})


def _history(z: _Zip, job: Job) -> None:
    events = [{"time": e.created_at.isoformat(), "kind": e.kind, "step": e.step, "message": e.message, "data": e.data}
              for e in RunEvent.objects.filter(job=job).order_by("created_at", "id")]
    z.json("history/events.json", events)
    record = GuardRulesRecord.objects.filter(job=job).first()
    z.json("history/guard.json", {
        "rules": (job.config or {}).get("guard_rules"),
        "stall": (job.config or {}).get("stall"),
        "trips": [e for e in events if e["kind"] in GUARD_KINDS],
        "state": None if record is None else {"trips": record.trips, "engine": record.state,
                                              "stalled_since": record.stalled_since, "last_stall_check": record.stall}})


def _samples(z: _Zip, run: RunDir, n: int) -> None:
    for step in rollouts.steps(run.path)[-n:] if n else []:
        z.file(f"samples/rollout/{step}.jsonl", run.samples(rollouts.KIND, step), tail_mb=SAMPLE_FILE_MB)


def _rewards(z: _Zip, job: Job, run: RunDir) -> None:
    for version in job.reward_versions.select_related("function").order_by("pk"):
        z.text(f"rewards/{reward_filename(version)}", version.source)
    pinned = run.reward_dir
    for path in sorted(pinned.glob("*.py")) if pinned.is_dir() else []:
        z.file(f"rewards/pinned/{path.name}", path)


def _sha256(path: Path) -> dict[str, Any] | None:
    digest, rows = hashlib.sha256(), 0
    try:
        with path.open("rb") as fh:
            for line in fh:
                digest.update(line)
                rows += bool(line.strip())
    except OSError:
        return None
    return {"sha256": digest.hexdigest(), "rows": rows}


def _data(z: _Zip, job: Job, run: RunDir) -> None:
    version = job.dataset_version
    z.json("data.json", {
        "dataset_version": None if version is None else {
            "id": version.pk, "dataset": version.dataset.name, "number": version.number,
            "content_hash": version.content_hash, "row_count": getattr(version, "row_count", None)},
        "pinned_files": {split: _sha256(run.data(split)) for split in ("train", "val")},
        "manifest": job.data_manifest})
