"""Reads for jobs and models, and name lookups shared by the CLI and the API."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db.models import Avg, Count, QuerySet

from training.length_preflight import CLIP_METRIC
from training.rundir import RunDir
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetKind, DatasetVersion, VersionStatus
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.models import RewardFunction, RewardVersion
from webapp.runs.models import FINAL_STATES, Checkpoint, CheckpointStatus, Job, JobState, MetricPoint, RunEvent
from webapp.runs.services.sync import tail_lines

KIND_DATASETS = {"grpo": (DatasetKind.PROMPTS,), "reward_model": (DatasetKind.PREFERENCE,),
                 "distill": (DatasetKind.PROMPTS, DatasetKind.PREFERENCE)}


def job_list(*, project) -> QuerySet[Job]:
    return Job.objects.filter(project=project).select_related("base_model", "parent", "dataset_version__dataset")


def rollout_run_dirs(project, job_id: int | None = None, limit: int | None = None) -> list[tuple[int, str, RunDir]]:
    """(job id, label, run dir) of the project's runs that have a run directory, newest first (or the one job):
    where the rewards page finds stored rollouts (registered with it by RunsConfig.ready)."""
    jobs = Job.objects.filter(project=project).exclude(run_dir="").select_related("base_model").order_by("-pk")
    if job_id is not None:
        jobs = jobs.filter(pk=job_id)
    return [(job.pk, f"#{job.pk} {job.kind}" + (f" · {job.base_model.name}" if job.base_model_id else ""),
             RunDir(job.run_dir)) for job in jobs[:limit]]


def job_get(*, project, pk: int) -> Job | None:
    return job_list(project=project).select_related("teacher_model", "resume_checkpoint", "created_by") \
        .filter(pk=pk).first()


def job_progress(job: Job) -> float | None:
    total = (job.config or {}).get("total_steps")
    if not total:
        return None
    if job.state == JobState.SUCCEEDED:
        return 1.0
    return max(0.0, min(1.0, (job.last_step or 0) / total))


def job_events(job: Job, limit: int = 100) -> QuerySet[RunEvent]:
    return job.events.select_related("actor").order_by("-created_at", "-id")[:limit]


def can_resume(job: Job) -> bool:
    from webapp.runs.services.launch import resume_target

    return (job.state in FINAL_STATES and job.state != JobState.SUCCEEDED and not job.is_attached
            and resume_target(job) is not None)


def log_tail(job: Job, attempt_number: int | None = None, lines: int = 200) -> dict[str, Any]:
    """The live log: the last lines of an attempt's log.txt (default: the latest started attempt)."""
    attempts = job.attempts.filter(supervisor_pid__isnull=False).order_by("-number")
    attempt = attempts.filter(number=attempt_number).first() if attempt_number else attempts.first()
    text: list[str] = []
    if attempt is not None and job.run_dir:
        text = tail_lines(RunDir(job.run_dir).attempt(attempt.number).log, lines)
    return {"job": job.pk, "state": job.state, "attempt": attempt.number if attempt else None,
            "attempt_state": attempt.state if attempt else None,
            "lines": text, "last_step": job.last_step, "total_steps": (job.config or {}).get("total_steps"),
            "heartbeat_at": job.heartbeat_at.isoformat() if job.heartbeat_at else None,
            "active": job.is_active, "error": job.error, **start_up(job, attempt)}


def start_up(job: Job, attempt) -> dict[str, Any]:
    """Where a live job is before its attempt's first step: {"phase": words, "since": when it began} (phase
    None once the attempt logs steps, or when the job is not live)."""
    from training.trainer_log import startup_phase

    phase, since = None, None
    if job.state == JobState.QUEUED:
        phase, since = f"Waiting for a worker on the {job.queue} queue", job.updated_at
    elif job.state == JobState.STARTING:
        phase, since = "Preparing the run (data, reward, launch plan)", job.updated_at
    elif job.state == JobState.RUNNING and attempt is not None and not MetricPoint.objects.filter(
            job=job, attempt=attempt.number).exists():
        log = RunDir(job.run_dir).attempt(attempt.number).log
        phase = startup_phase(_log_head(log)) or "Starting the trainer"
        since = attempt.started_at
    return {"phase": phase, "phase_since": since.isoformat() if phase and since else None}


def _log_head(path, max_bytes: int = 4 * 1024 * 1024) -> list[str]:
    """The start of a log (where VERL says what it is doing before its first step)."""
    from training.trainer_log import strip_ansi

    try:
        with open(path, "rb") as fh:
            return strip_ansi(fh.read(max_bytes).decode("utf-8", errors="replace")).splitlines()
    except OSError:
        return []


def ready_versions(*, project) -> QuerySet[DatasetVersion]:
    return DatasetVersion.objects.filter(dataset__project=project, status=VersionStatus.READY) \
        .select_related("dataset").order_by("dataset__name", "-number")


def model_list(*, project) -> QuerySet[ModelEntry]:
    return ModelEntry.objects.filter(project=project).select_related("created_by", "source_job")


def checkpoint_on_disk(ckpt: Checkpoint) -> bool:
    """Usable now: available, and its folder still on disk (retention may have removed it since the run's last
    sync, which marks it then)."""
    return ckpt.status == CheckpointStatus.AVAILABLE and Path(ckpt.path).is_dir()


def available_checkpoints(job: Job) -> list[Checkpoint]:
    """The job's checkpoints a user can resume from or register, oldest first (`checkpoint_on_disk`)."""
    return [c for c in job.checkpoints.filter(status=CheckpointStatus.AVAILABLE).order_by("step")
            if checkpoint_on_disk(c)]


# -- name lookups (CLI / API) ------------------------------------------------------------------

def _split_version(ref: str) -> tuple[str, int | None]:
    name, sep, version = str(ref).strip().rpartition(":")
    if sep and version.lstrip("v").isdigit():
        return name, int(version.lstrip("v"))
    return str(ref).strip(), None


def dataset_version_by_ref(*, project, ref: str | int | None, kind: str) -> DatasetVersion:
    """'NAME[:VERSION]' or a version id; default: the newest ready version whose kind fits the job."""
    qs = ready_versions(project=project)
    if ref in (None, ""):
        dv = qs.filter(dataset__kind__in=KIND_DATASETS.get(kind, ())).order_by("-created_at").first()
        if dv is None:
            raise ApplicationError("No ready dataset version fits this job kind; upload one or pass --dataset.",
                                   field="dataset_version")
        return dv
    if isinstance(ref, int) or str(ref).isdigit():
        dv = qs.filter(pk=int(ref)).first()
        if dv is None:
            raise ApplicationError(f"No ready dataset version with id {ref} in this project.", field="dataset_version")
        return dv
    name, number = _split_version(str(ref))
    versions = DatasetVersion.objects.filter(dataset__project=project, dataset__name=name).select_related("dataset")
    if not versions.exists():
        raise ApplicationError(f"No dataset named {name!r} in this project.", field="dataset_version")
    if number is None:
        dv = versions.filter(status=VersionStatus.READY).order_by("-number").first()
        if dv is None:
            raise ApplicationError(f"Dataset {name!r} has no ready version yet.", field="dataset_version")
        return dv
    dv = versions.filter(number=number).first()
    if dv is None:
        raise ApplicationError(f"Dataset {name!r} has no version {number}.", field="dataset_version")
    return dv


def model_by_ref(*, project, ref: str | int | None, field: str = "base_model",
                 default_names: tuple[str, ...] = ()) -> ModelEntry | None:
    if ref in (None, ""):
        for name in default_names:
            m = ModelEntry.objects.filter(project=project, name=name).first()
            if m is not None:
                return m
        return None
    qs = ModelEntry.objects.filter(project=project)
    m = qs.filter(pk=int(ref)).first() if isinstance(ref, int) or str(ref).isdigit() else None
    m = m or qs.filter(name=str(ref)).first()
    if m is None:
        raise ApplicationError(f"No model {ref!r} registered in this project (see the Models page).", field=field)
    return m


def default_base_model(*, project, kind: str) -> ModelEntry | None:
    names = ("demo-rm-base", "demo-tiny") if kind == "reward_model" else ("demo-tiny",)
    m = model_by_ref(project=project, ref=None, default_names=names)
    if m is None:
        wanted = ModelKind.REWARD_MODEL if kind == "reward_model" else ModelKind.CAUSAL_LM
        qs = ModelEntry.objects.filter(project=project, kind=wanted)
        m = qs.first() if qs.count() == 1 else None
    return m


def reward_component_by_ref(*, project, ref: str, weight: float = 1.0) -> dict[str, Any]:
    """'NAME[:VERSION]' of a reward function (default: its latest version), or a reward model's name."""
    name, number = _split_version(ref)
    fn = RewardFunction.objects.filter(project=project, name=name).first()
    if fn is not None:
        rv = fn.versions.filter(number=number).first() if number else fn.versions.order_by("-number").first()
        if rv is None:
            raise ApplicationError(f"Reward function {name!r} has no version {number or ''}.".replace(" .", "."),
                                   field="reward_spec")
        return {"type": "function", "version_id": rv.pk, "weight": weight}
    model = ModelEntry.objects.filter(project=project, name=ref, kind=ModelKind.REWARD_MODEL).first()
    if model is not None:
        return {"type": "model", "model_id": model.pk, "weight": weight}
    raise ApplicationError(f"No reward function or reward model named {ref!r} in this project.", field="reward_spec")


def default_reward_spec(*, project, kind: str) -> dict[str, Any]:
    """GRPO without --reward: the project's only reward function, if there is exactly one."""
    if kind != "grpo":
        return {"shaping": "raw", "components": []}
    fns = list(RewardFunction.objects.filter(project=project)[:2])
    if len(fns) == 1 and fns[0].latest_version is not None:
        return {"shaping": "raw", "components": [{"type": "function", "version_id": fns[0].latest_version.pk,
                                                  "weight": 1.0}]}
    return {"shaping": "raw", "components": []}


def reward_versions_of(job: Job) -> QuerySet[RewardVersion]:
    return job.reward_versions.select_related("function").order_by("function__name")


# -- re-scores -----------------------------------------------------------------------------------

RESCORE_SORTS = {"step": ("step", "row"), "old": ("old_score",), "-old": ("-old_score",), "new": ("new_score",),
                 "-new": ("-new_score",), "delta": ("delta",), "-delta": ("-delta",)}
RESCORE_SHOWS = ("all", "changed", "unchanged", "errors")


def job_rescores(job: Job):
    from webapp.runs.models import Rescore

    return Rescore.objects.filter(job=job).select_related("reward_version__function", "created_by")


def rescore_get(*, project, pk: int):
    from webapp.runs.models import Rescore

    return Rescore.objects.select_related("job", "reward_version__function", "created_by").filter(
        job__project=project, pk=pk).first()


def rescore_samples(rescore, *, sort: str = "step", show: str = "all", step: int | None = None, text: str = ""):
    """A re-score's samples, filtered (changed / unchanged / errors, one step, text in the response) and sorted
    (missing scores last)."""
    from django.db.models import F

    qs = rescore.samples.all()
    if show == "changed":
        qs = qs.filter(changed=True)
    elif show == "unchanged":
        qs = qs.filter(changed=False)
    elif show == "errors":
        qs = qs.exclude(error="")
    if step is not None:
        qs = qs.filter(step=step)
    if text:
        qs = qs.filter(response__icontains=text)
    order = [F(f[1:]).desc(nulls_last=True) if f.startswith("-") else F(f).asc(nulls_last=True)
             for f in RESCORE_SORTS.get(sort, RESCORE_SORTS["step"])]
    return qs.order_by(*order, "step", "row")


def clip_ratio(job: Job) -> dict[str, Any] | None:
    """The share of responses cut at the max response length (both backends log response_length/clip_ratio):
    the latest step's and the mean over the run; None before the first step."""
    points = MetricPoint.objects.filter(job=job, name=CLIP_METRIC)
    last = points.order_by("-step").values("step", "value").first()
    if last is None:
        return None
    totals = points.aggregate(mean=Avg("value"), n=Count("id"))
    return {"step": last["step"], "last": last["value"], "mean": totals["mean"], "n": totals["n"]}
