"""Zero-signal prompts: a dry run of a verifiable prompt set before GRPO trains on it.

`dry_run_request` checks the choice (a prompt-set version, a registered model or a checkpoint, a reward
version) and queues a Celery task (by name); `dry_run_execute`, the task's body, writes the prompts, the
reward source and a request file, runs `python -m training.zero_signal` in a subprocess (it loads the
model and runs the reward code in the sandbox, never in the worker), follows its progress file and stores
the result. `dry_run_derive` makes a new version of the dataset without the tied prompts (lineage and
audit, through `datasets.cleaning.version_derive`); nothing is deleted in place.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from training.hparams import BY_KEY
from training.rundir import write_json
from webapp.core.audit import audit
from webapp.core.queue import ZERO_SIGNAL, enqueue
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.cleaning import version_derive
from webapp.datasets.models import DatasetKind, DatasetRow, DatasetVersion, VersionStatus, stored_value
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.models import RewardVersion
from webapp.runs.models import Checkpoint, CheckpointStatus, ZeroSignalRun, ZeroSignalStatus
from webapp.runs.services.spec import sandbox_block

TIMEOUT_S = int(getattr(settings, "ZERO_SIGNAL_TIMEOUT_S", 60 * 60))
LIMITS = {"group_size": (2, 64, 4), "max_response_length": (1, 4096, 64), "max_prompts": (1, 1_000_000, 2000)}
PARAMS = ("group_size", "max_response_length", "max_prompts", "temperature", "seed")
TIED_KEPT = 100_000  # tied prompt indices kept in the result (the version without them uses all of them)


def default_batch() -> int:
    return int(BY_KEY["batch_size"].default)


def effective_batch(batch: int, tied_share: float | None) -> float | None:
    """Prompts per step that still give a gradient: batch × (1 − tied share)."""
    return None if tied_share is None else round(batch * (1 - tied_share), 1)


def _number(params: dict, key: str, cast=int):
    low, high, default = LIMITS[key]
    raw = params.get(key)
    if raw in (None, ""):
        return default
    try:
        value = cast(raw)
    except (TypeError, ValueError):
        raise ApplicationError(f"{key.replace('_', ' ')} must be a whole number.", field=key) from None
    if not low <= value <= high:
        raise ApplicationError(f"{key.replace('_', ' ')} must be from {low:,} to {high:,}.", field=key)
    return value


def _temperature(raw: Any) -> float:
    try:
        value = float(raw if raw not in (None, "") else 1.0)
    except (TypeError, ValueError):
        raise ApplicationError("temperature must be a number.", field="temperature") from None
    if not 0 < value <= 5:
        raise ApplicationError("temperature must be above 0 and at most 5: greedy samples would all be the same.",
                               field="temperature")
    return value


def _id(raw: Any, what: str, field: str) -> int | None:
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ApplicationError(f"Choose a {what} from the list.", field=field) from None


def dry_run_request(*, version: DatasetVersion, user, model_id: Any = None, checkpoint_id: Any = None,
                    reward_version_id: Any = None, params: dict | None = None,
                    enqueue_task: bool = True) -> ZeroSignalRun:
    """Check the choice and queue the dry run (the CLI runs it itself: enqueue_task=False);
    ApplicationError says what is wrong."""
    project = version.dataset.project
    if version.dataset.kind != DatasetKind.PROMPTS or version.status != VersionStatus.READY:
        raise ApplicationError("A zero-signal dry run needs a ready version of a verifiable prompt set.")
    params = dict(params or {})
    model_pk, ckpt_pk = _id(model_id, "model", "model"), _id(checkpoint_id, "checkpoint", "checkpoint")
    if (model_pk is None) == (ckpt_pk is None):
        raise ApplicationError("Choose either a registered model or a checkpoint to sample from.", field="model")
    model = checkpoint = None
    if model_pk is not None:
        model = ModelEntry.objects.filter(project=project, pk=model_pk).first()
        if model is None or model.kind != ModelKind.CAUSAL_LM:
            raise ApplicationError("Choose a causal language model of this project.", field="model")
        if not model.path or not Path(model.path).is_dir():
            raise ApplicationError(f"The model {model.name} has no local folder on this server.", field="model")
    else:
        checkpoint = Checkpoint.objects.filter(job__project=project, pk=ckpt_pk).select_related("job").first()
        if checkpoint is None or checkpoint.status != CheckpointStatus.AVAILABLE \
                or not Path(checkpoint.path).is_dir():
            raise ApplicationError("Choose a checkpoint of this project that is still on disk.", field="checkpoint")
    rv_pk = _id(reward_version_id, "reward version", "reward_version")
    reward = RewardVersion.objects.filter(function__project=project, pk=rv_pk).select_related("function").first() \
        if rv_pk is not None else None
    if reward is None:
        raise ApplicationError("Choose a reward function version of this project.", field="reward_version")
    clean = {key: _number(params, key) for key in LIMITS}
    clean["temperature"] = _temperature(params.get("temperature"))
    clean["seed"] = _id(params.get("seed"), "seed", "seed") or 0
    with transaction.atomic():
        run = ZeroSignalRun.objects.create(version=version, model=model, checkpoint=checkpoint, reward_version=reward,
                                           params=clean, created_by=user if getattr(user, "pk", None) else None)
        audit(actor=user, action="dataset.zero_signal", project=project, obj=version,
              summary=f"Requested a zero-signal dry run of {version} ({source_label(run)}, "
                      f"{clean['group_size']} samples per prompt, reward {reward.function.name} v{reward.number})",
              after={"run": run.pk, **clean})
        if enqueue_task:
            transaction.on_commit(lambda: enqueue(ZERO_SIGNAL, run.pk))
    return run


def source_label(run: ZeroSignalRun) -> str:
    if run.model_id:
        return f"model {run.model.name}"
    if run.checkpoint_id:
        return f"run #{run.checkpoint.job_id} step {run.checkpoint.step}"
    return "a model since removed"


def workdir(run: ZeroSignalRun) -> Path:
    return Path(settings.MEDIA_ROOT) / "zero-signal" / str(run.pk)


def _write_prompts(run: ZeroSignalRun, path: Path) -> int:
    """The prompts to sample: the rows a launch review chose (`params["rows"]`), else the version's first rows."""
    if run.params.get("rows") is not None:
        rows = [{"index": i, **row} for i, row in enumerate(run.params["rows"])]  # a row's own index comes after
    else:
        rows = ({"index": index, "prompt": stored_value(prompt, text), "ground_truth": truth, "data_source": source,
                 "extra_info": extra or {}}
                for index, prompt, text, truth, source, extra in DatasetRow.objects.filter(version=run.version)
                .order_by("index").values_list("index", "prompt", "prompt_text", "ground_truth", "data_source",
                                               "extra_info")
                [:run.params["max_prompts"]].iterator(chunk_size=2000))
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def _reward(run: ZeroSignalRun, work: Path) -> dict[str, Any]:
    """The reward block: a job's whole reward (`params["reward_spec"]`: its function components, weights and
    shaping, as the launch review checks it), else the run's one reward version."""
    spec = run.params.get("reward_spec")
    if not spec:
        spec = {"shaping": "raw", "components": [{"type": "function", "version_id": run.reward_version_id}]}
    versions = {v.pk: v for v in RewardVersion.objects.filter(
        pk__in=[c.get("version_id") for c in spec["components"]])}
    components = []
    for comp in spec["components"]:
        rv = versions.get(comp.get("version_id"))
        if rv is None:
            raise ApplicationError("A reward version was deleted before the dry run started.")
        (work / f"reward_{rv.pk}.py").write_text(rv.source, encoding="utf-8")
        components.append({"type": "function", "path": f"reward_{rv.pk}.py", "name": rv.entry_point,
                           "weight": float(comp.get("weight", 1.0))})
    return {"components": components, "shaping": spec.get("shaping") or "raw"}


def _write_inputs(run: ZeroSignalRun, work: Path) -> Path:
    """prompts.jsonl, the reward sources and request.json in `work`; the request file's path."""
    count = _write_prompts(run, work / "prompts.jsonl")
    if run.model_id:
        model, base = run.model.path, None
    else:
        ckpt = run.checkpoint
        model, base = ckpt.path, (ckpt.job.base_model.path if ckpt.job.base_model_id else None)
    p = run.params
    request = {"model": model, "base_model": base or None, "prompts": "prompts.jsonl", "group_size": p["group_size"],
               "max_response_length": p["max_response_length"], "temperature": p["temperature"], "seed": p["seed"],
               "reward": _reward(run, work), "sandbox": sandbox_block(), "device": "auto", "engine": "auto",
               # about 20 progress steps, at most 64 a batch (a launch review's few prompts: one batch)
               "batch_prompts": p.get("batch_prompts") or max(1, min(64, -(-count // 20)))}
    return write_json(work / "request.json", request)


def _update(run: ZeroSignalRun, **fields) -> None:
    ZeroSignalRun.objects.filter(pk=run.pk).update(updated_at=timezone.now(), **fields)
    for key, value in fields.items():
        setattr(run, key, value)


def dry_run_execute(*, run_id: int, poll_s: float = 0.5,
                    on_progress: Callable[[float], None] | None = None) -> ZeroSignalRun | None:
    """Run a queued dry run (the Celery task's body); a second delivery does nothing."""
    from training.backends.base import REPO_ROOT, python_executable

    claimed = ZeroSignalRun.objects.filter(pk=run_id, status=ZeroSignalStatus.QUEUED).update(
        status=ZeroSignalStatus.RUNNING, started_at=timezone.now(), updated_at=timezone.now())
    run = ZeroSignalRun.objects.select_related("version__dataset__project", "model", "checkpoint__job__base_model",
                                               "reward_version__function").filter(pk=run_id).first()
    if not claimed or run is None:
        return run
    work = workdir(run)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    error = ""
    try:
        if run.reward_version_id is None or (run.model_id is None and run.checkpoint_id is None):
            raise ApplicationError("The model or reward version was deleted before the dry run started.")
        request = _write_inputs(run, work)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled",
               "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
        cmd = [python_executable(), "-m", "training.zero_signal", "--request", str(request),
               "--out", str(work / "result.json"), "--progress", str(work / "progress.json")]
        with (work / "log.txt").open("wb") as log:
            proc = subprocess.Popen(cmd, cwd=str(REPO_ROOT), env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            error = _follow(run, proc, work / "progress.json", poll_s, on_progress)
        if error == "" and proc.returncode != 0:
            lines = (work / "log.txt").read_text(errors="replace").strip().splitlines()
            error = (lines[-1] if lines else f"exit code {proc.returncode}").removeprefix("error: ")
    except ApplicationError as exc:
        error = exc.message
    if error:
        _update(run, status=ZeroSignalStatus.FAILED, error=f"The dry run failed: {error}"[:2000],
                finished_at=timezone.now())
        return run
    raw = json.loads((work / "result.json").read_text())
    tied = sorted(g["index"] for g in raw["groups"] if g["tied"])
    result = {k: raw[k] for k in ("prompts", "group_size", "counted", "tied", "tied_share", "all_right", "all_wrong",
                                  "right_at", "tie_tolerance", "engine", "seconds", "examples")}
    result["answers"] = raw.get("answers", [])
    result.update(tied_indices=tied[:TIED_KEPT], tied_truncated=len(tied) > TIED_KEPT,
                  uncounted=raw["uncounted"][:1000], errors=sum(g["errors"] for g in raw["groups"]),
                  values={str(g["index"]): g["value"] for g in raw["groups"] if g["tied"]} if len(tied) <= 5000
                  else {})
    _update(run, status=ZeroSignalStatus.SUCCEEDED, progress=1.0, result=result, finished_at=timezone.now())
    return run


def _follow(run: ZeroSignalRun, proc: subprocess.Popen, progress: Path, poll_s: float,
            on_progress: Callable[[float], None] | None) -> str:
    """Copy the subprocess's progress to the run until it exits; an error message, or "" when it finished."""
    deadline = time.monotonic() + TIMEOUT_S
    last = -1.0
    while True:
        finished = proc.poll() is not None
        try:
            state = json.loads(progress.read_text())
            fraction = 0.99 * state["done"] / max(state["total"], 1)
        except (OSError, ValueError, KeyError, TypeError):
            fraction = last
        if fraction > last:
            last = fraction
            _update(run, progress=fraction)
            if on_progress:
                on_progress(fraction)
        if finished:
            return ""
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return f"it took longer than {TIMEOUT_S} s and was stopped"
        time.sleep(poll_s)


def dry_run_derive(*, run: ZeroSignalRun, user) -> DatasetVersion:
    """A new version of the prompt set without the prompts whose groups tied in this dry run."""
    if run.status != ZeroSignalStatus.SUCCEEDED:
        raise ApplicationError("The dry run has not finished.")
    if run.result.get("tied_truncated"):
        raise ApplicationError("Too many tied prompts to list; run the dry run on fewer prompts.")
    if run.derived_id and DatasetVersion.objects.filter(pk=run.derived_id).exists():
        raise ApplicationError(f"This dry run already made v{run.derived.number}.")
    tied = run.result.get("tied_indices") or []
    if not tied:
        raise ApplicationError("No prompt tied: there is nothing to drop.")
    source, r = run.version, run.result
    share = f"{r['tied_share']:.1%}" if r.get("tied_share") is not None else "n/a"
    lineage = {"operation": "zero-signal", "zero_signal_run": run.pk, "tied_share": r.get("tied_share"),
               "all_right": r.get("all_right"), "all_wrong": r.get("all_wrong"), "group_size": r.get("group_size"),
               "sampled_from": source_label(run),
               "reward": f"{run.reward_version.function.name} v{run.reward_version.number}"
               if run.reward_version_id else "", "dropped": {"zero_signal": len(tied)},
               "summary": f"zero-signal prompts {len(tied):,} ({share} tied)", "dropped_indices": tied[:1000],
               "at": timezone.now().isoformat()}
    with transaction.atomic():
        version = version_derive(source=source, user=user, drop=tied, lineage=lineage,
                                 action="dataset.zero_signal_drop",
                                 summary=f"Dropped {count(len(tied), 'zero-signal prompt')} of {source} "
                                         f"(dry run {run.pk}: "
                                         f"{share} tied, {source_label(run)}) into a new version")
        _update(run, derived=version)
    return version


def run_payload(run: ZeroSignalRun, batch: int | None = None) -> dict[str, Any]:
    """What the page, the API and the CLI show of a dry run."""
    batch = batch or default_batch()
    r = run.result or {}
    return {"id": run.pk, "dataset": run.version.dataset.name, "version": run.version.number,
            "status": run.status, "progress": run.progress, "error": run.error, "source": source_label(run),
            "reward": (f"{run.reward_version.function.name} v{run.reward_version.number}"
                       if run.reward_version_id else ""), "params": run.params,
            "summary": {k: r.get(k) for k in ("prompts", "group_size", "counted", "tied", "tied_share", "all_right",
                                              "all_wrong", "right_at", "errors", "engine", "seconds")} if r else {},
            "tied_indices": r.get("tied_indices", []), "examples": r.get("examples", []), "batch": batch,
            "effective_batch": effective_batch(batch, r.get("tied_share")),
            "derived_version": run.derived.number if run.derived_id else None,
            "created_at": run.created_at.isoformat(), "finished_at": run.finished_at.isoformat()
            if run.finished_at else None}
