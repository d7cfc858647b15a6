"""Test-runs: score a reward source on dataset rows or pasted responses in the sandbox.

A test-run is asked for in a request (`reward_test_run_create`: checked, stored as queued, at most
REWARD_TEST_RUNS_PER_USER active per user) and run by a Celery worker (`reward_test_run_execute`),
which stores the progress as it scores; the page follows it. User code never runs in the web or
worker process: it goes to a `training.sandbox.SandboxPool` (REWARD_TEST_RUN_WORKERS sandboxes, each
a child process that cannot see the app's checkout, settings, database, media or run files
(`sandbox_hidden_paths`), has no network and runs under memory/CPU/time limits.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, models, transaction
from django.utils import timezone

from training.reward_mix import mix, usable
from webapp.core.audit import audit
from webapp.core.models import Project
from webapp.core.queue import RUN_REWARD_TEST, USER_CODE_QUEUE, enqueue
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.models import DatasetRow, VersionStatus, restore_stored
from webapp.rewards import samples as sample_lib
from webapp.rewards.analysis import normalize_source, pair_summary, source_sha256, summarize
from webapp.rewards.models import RewardFunction, RewardTestRun, RewardTestRunState, RewardVersion
from webapp.rewards.sandbox_status import REFUSED
from webapp.rewards.services import SOURCE_MAX_CHARS, _check_entry_point

# Scoring for the web app (re-scores, probes) gets training's per-call limit but a shorter batch limit; a
# test-run's reward code (loading and scoring) gets REWARD_TEST_RUN_TIME_LIMIT_S of wall clock in all.
BATCH_LIMIT_S = 60.0
SPLITS = ("", "train", "val")
TRACEBACK_KEEP = 8000
PROGRESS_EVERY_S = 0.5
SLOWEST_SHOWN = 5  # the test-run page names this many slowest samples
# an active test-run older than this lost its worker (the batch limit is 60 s): it no longer counts
STALE_AFTER = timedelta(minutes=10)


def sandbox_limits(wall_s: float | None = None):
    """The sandbox limits of scoring for the web app; `wall_s` caps loading and each batch (a test-run's)."""
    from training.sandbox import SandboxLimits

    batch = min(float(settings.REWARD_BATCH_TIME_LIMIT_S), BATCH_LIMIT_S, wall_s or BATCH_LIMIT_S)
    load = min(SandboxLimits.load_time_limit_s, wall_s or SandboxLimits.load_time_limit_s)
    return SandboxLimits(time_limit_s=min(float(settings.REWARD_TIME_LIMIT_S), batch), batch_time_limit_s=batch,
                         load_time_limit_s=load, memory_mb=int(settings.REWARD_MEMORY_MB))


def test_run_time_limit() -> float:
    return max(1.0, float(settings.REWARD_TEST_RUN_TIME_LIMIT_S))


def sandbox_hidden_paths() -> list[str]:
    """Paths the reward code must not see: the checkout (settings, .env), media, runs, models, the db."""
    paths = [settings.BASE_DIR, settings.MEDIA_ROOT, settings.RUNS_ROOT, settings.MODELS_ROOT, settings.VAR_DIR]
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3") and db["NAME"] and str(db["NAME"]) != ":memory:":
        paths.append(Path(db["NAME"]).resolve().parent)
    return outermost_paths(str(Path(p).resolve()) for p in paths if Path(p).exists())


def outermost_paths(paths) -> list[str]:
    """Drop paths inside another one: bubblewrap masks a folder with an empty tmpfs, after which a
    nested mount point no longer exists (e.g. MODELS_ROOT inside VAR_DIR)."""
    unique = sorted(set(paths), key=len)
    out: list[str] = []
    for p in unique:
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


@dataclass
class Scored:
    mode: str
    results: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    isolation: str = ""
    error: str = ""
    error_lineno: int | None = None
    error_traceback: str = ""
    duration_ms: float = 0.0
    load_log: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    def to_dict(self) -> dict:
        return {"mode": self.mode, "ok": self.ok, "isolation": self.isolation, "summary": self.summary,
                "error": self.error, "error_lineno": self.error_lineno, "error_traceback": self.error_traceback,
                "duration_ms": round(self.duration_ms, 1), "results": self.results}


def _clip_extra(extra: dict) -> dict:
    text = json.dumps(extra, default=str)
    return extra if len(text) <= sample_lib.KEEP_CHARS else {"_clipped": sample_lib.clip(text)}


def score_samples(*, source: str, entry_point: str, mode: str, samples: list[sample_lib.Sample],
                  on_progress: Callable[[int], None] | None = None, limits=None, wall_s: float | None = None) -> Scored:
    """Run `samples` through the sandbox in one batch and summarise; a load failure is reported, not raised.

    `on_progress(done)` is called every PROGRESS_EVERY_S while results come in; `limits` (a SandboxLimits)
    replaces the default limits (probes use shorter ones); `wall_s` caps loading and scoring together (a
    test-run: the samples left when it is up fail with the reason)."""
    from training.sandbox import RewardLoadError, SandboxError, SandboxPool, SandboxUnavailable

    out = Scored(mode=mode)
    started = time.perf_counter()
    deadline = time.monotonic() + wall_s if wall_s else None
    scored = []
    try:
        # exact_timing: a test-run shows each sample's time, so an outlier must not hide in a group's mean
        with SandboxPool(source, name=entry_point, limits=limits or sandbox_limits(wall_s),
                         hidden_paths=sandbox_hidden_paths(), exact_timing=True,
                         size=int(settings.REWARD_TEST_RUN_WORKERS) or None) as sandbox:
            out.isolation, out.load_log = sandbox.mode, sandbox.load_log
            report_at = time.monotonic() + PROGRESS_EVERY_S
            for res in sandbox.iter_scores([s.item for s in samples], deadline=deadline):
                scored.append(res)
                if on_progress is not None and time.monotonic() >= report_at:
                    on_progress(len(scored))
                    report_at = time.monotonic() + PROGRESS_EVERY_S
    except RewardLoadError as exc:
        out.error, out.error_lineno = f"The reward could not be loaded: {exc.message}", exc.lineno
        out.error_traceback = (exc.traceback or exc.stderr or "")[-TRACEBACK_KEEP:]
        scored = []
    except SandboxUnavailable as exc:  # fail closed: no isolation here, so the reward did not run
        out.error, out.isolation = str(exc), REFUSED
        scored = []
    except SandboxError as exc:
        out.error = f"The sandbox failed: {exc}"
        scored = []
    out.duration_ms = (time.perf_counter() - started) * 1000
    for sample, res in zip(samples, scored, strict=False):
        out.results.append({
            "i": res.index, "row_index": sample.row_index, "role": sample.role,
            "prompt": sample_lib.clip(sample.prompt, 500), "solution": sample_lib.clip(sample.item["solution_str"]),
            "ground_truth": sample_lib.clip(sample.item["ground_truth"], 500),
            "score": _reward(res), "log": res.log, "extra": _clip_extra(res.extra or {}),
            "error": _error(res.error, wall_s),
            "traceback": (res.traceback or "")[-TRACEBACK_KEEP:] or None, "lineno": res.lineno,
            "duration_ms": round(res.duration_ms, 3),
            **({"stored_score": sample.meta["stored_score"]} if "stored_score" in sample.meta else {}),
        })
    out.summary = _summary(mode, out.results, out.duration_ms)
    if out.load_log:
        out.summary["load_log"] = out.load_log  # printed while the module loaded, before any sample
    return out


def _error(error: str | None, wall_s: float | None) -> str | None:
    if wall_s and error and error.startswith("the batch took longer than"):  # the test-run's clock ran out
        return f"not scored: the test-run took longer than {wall_s:g} s (REWARD_TEST_RUN_TIME_LIMIT_S)"
    return error


def _reward(res) -> float | None:
    """What a job whose one component is this function gives the sample: the shared reward mix at
    weight 1 with raw shaping. A failed call shows as None here (a job would count it as 0)."""
    if res.error or not usable(res.score):
        return None
    return mix([float(res.score)], [1.0], "raw").score


def _summary(mode: str, results: list[dict], duration_ms: float) -> dict:
    scores = [r["score"] for r in results]
    summary: dict[str, Any] = {"all": summarize(scores), "duration_ms": round(duration_ms, 1),
                               "extra_keys": sorted({k for r in results for k in r["extra"]}),
                               "error_lines": sorted({r["lineno"] for r in results if r["lineno"]}),
                               "slowest": slowest_samples(results)}
    if mode == "preference":
        chosen = [r["score"] for r in results if r["role"] == "chosen"]
        rejected = [r["score"] for r in results if r["role"] == "rejected"]
        summary.update(chosen=summarize(chosen), rejected=summarize(rejected), pairs=pair_summary(chosen, rejected))
    return summary


def slowest_samples(results: list[dict], k: int = SLOWEST_SHOWN) -> list[dict]:
    """The `k` samples whose call took longest (each call is timed on its own), slowest first."""
    timed = sorted((r for r in results if r.get("duration_ms")), key=lambda r: (-r["duration_ms"], r["i"]))[:k]
    return [{"i": r["i"], "row_index": r["row_index"], "role": r["role"], "duration_ms": r["duration_ms"],
             "error": r["error"]} for r in timed]


def _rows(dataset_version, split: str, limit: int) -> list[dict]:
    qs = DatasetRow.objects.filter(version=dataset_version)
    if split:
        qs = qs.filter(split=split)
    fields = ["index", "prompt", "prompt_text", "chosen_text", "rejected_text", "ground_truth", "data_source",
              "extra_info"]
    return [restore_stored(r) for r in qs.order_by("index").values(*fields)[:limit]]


def prepare_samples(*, project, dataset_version=None, split: str = "", limit: int | None = None,
                    responses_text: str = "") -> tuple[str, list[sample_lib.Sample]]:
    """Check the user's choice and build the samples (raises ApplicationError with the field at fault).

    With pasted responses `limit` is ignored: every response is scored (against the first rows).
    """
    if split not in SPLITS:
        raise ApplicationError("Choose all rows, train or val.", field="split")
    if limit is not None and not 1 <= limit <= sample_lib.MAX_SAMPLES:
        raise ApplicationError(f"Choose between 1 and {sample_lib.MAX_SAMPLES} samples.", field="limit")
    if dataset_version is not None:
        if dataset_version.dataset.project_id != project.pk:
            raise ApplicationError("That dataset version is not in this project.", field="dataset_version")
        if dataset_version.status != VersionStatus.READY:
            raise ApplicationError(f"{dataset_version} is not ready ({dataset_version.status}).",
                                   field="dataset_version")
    try:
        responses = sample_lib.parse_responses(responses_text) if responses_text.strip() else None
        if responses is None and dataset_version is None:
            raise sample_lib.SampleError("Choose a dataset version, or paste responses to score.")
        rows = None
        if dataset_version is not None:
            rows = _rows(dataset_version, split, len(responses) if responses is not None else (limit or 20))
        return sample_lib.build_samples(rows=rows, kind=dataset_version.dataset.kind if dataset_version else None,
                                        responses=responses)
    except sample_lib.SampleError as exc:
        field_name = "responses" if responses_text.strip() else "dataset_version"
        raise ApplicationError(str(exc), field=field_name) from None


def prepare_any(*, project, dataset_version=None, split: str = "", limit: int | None = None,
                responses_text: str = "", rollout_job_id: int | None = None, rollout_step: int | None = None,
                sample_model_id: int | None = None, generate: bool = False) -> tuple[str, str, list]:
    """(mode, origin words, samples) for any test-run source: stored rollouts of a run, responses sampled
    from a model (`generate=False` only checks the choice), or dataset rows / pasted responses."""
    from webapp.rewards import rollouts

    if limit is not None and not 1 <= limit <= sample_lib.MAX_SAMPLES:
        raise ApplicationError(f"Choose between 1 and {sample_lib.MAX_SAMPLES} samples.", field="limit")
    try:
        if rollout_job_id is not None:
            origin, samples = rollouts.rollout_samples(project=project, job_id=rollout_job_id, step=rollout_step,
                                                       limit=limit or 20)
            return "rollouts", origin, samples
        if sample_model_id is not None:
            if dataset_version is None:
                raise ApplicationError("Choose the prompt set whose prompts the model answers.",
                                       field="dataset_version")
            prepare_samples(project=project, dataset_version=dataset_version, split=split, limit=limit)  # checks
            rows = _rows(dataset_version, split, limit or 20)
            origin, samples = rollouts.model_samples(project=project, model_id=sample_model_id, rows=rows,
                                                     generate=generate)
            return "model", origin, samples
    except sample_lib.SampleError as exc:
        raise ApplicationError(str(exc), field="rollout_run" if rollout_job_id is not None else "sample_model") \
            from None
    mode, samples = prepare_samples(project=project, dataset_version=dataset_version, split=split, limit=limit,
                                    responses_text=responses_text)
    return mode, "", samples


def _enqueue(run_id: int) -> None:
    enqueue(RUN_REWARD_TEST, run_id, queue=USER_CODE_QUEUE)


def _check_active_limits(user, project) -> None:
    """At most REWARD_TEST_RUNS_PER_PROJECT queued or running test-runs per project and
    REWARD_TEST_RUNS_PER_USER per user (their rows are locked, project first, so two requests at once
    cannot both take the last slot); stale ones are closed as lost."""
    active_states = (RewardTestRunState.QUEUED, RewardTestRunState.RUNNING)
    mine = models.Q(function__project=project)
    if getattr(user, "pk", None):
        mine |= models.Q(created_by=user)
    RewardTestRun.objects.filter(mine, state__in=active_states, created_at__lt=timezone.now() - STALE_AFTER).update(
        state=RewardTestRunState.FAILED, finished_at=timezone.now(),
        error="No worker finished this test-run (lost); run it again.")
    Project.objects.select_for_update().filter(pk=project.pk).first()
    limit = int(settings.REWARD_TEST_RUNS_PER_PROJECT)
    if RewardTestRun.objects.filter(function__project=project, state__in=active_states).count() >= limit:
        raise ApplicationError(f"This project already has {limit} test-run{'s' if limit != 1 else ''} queued or "
                               "running; wait for one to finish.", field="source")
    if user is None or not getattr(user, "pk", None):
        return
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    limit = int(settings.REWARD_TEST_RUNS_PER_USER)
    if RewardTestRun.objects.filter(created_by=user, state__in=active_states).count() >= limit:
        raise ApplicationError(f"You already have {limit} test-run{'s' if limit != 1 else ''} queued or running; "
                               "wait for one to finish.", field="source")


def reward_test_run_create(*, function: RewardFunction, user, source: str | None = None,
                           version: RewardVersion | None = None, entry_point: str | None = None,
                           dataset_version=None, split: str = "", limit: int | None = 20,
                           responses_text: str = "", rollout_job_id: int | None = None,
                           rollout_step: int | None = None, sample_model_id: int | None = None) -> RewardTestRun:
    """Check and queue a test-run of a saved version (or an unsaved draft `source`) for a worker."""
    if version is not None and version.function_id != function.pk:
        raise ApplicationError("That version belongs to another reward function.", field="version")
    if source is None:
        version = version or function.latest_version
        if version is None:
            raise ApplicationError("This reward function has no saved version yet.", field="version")
        source, entry_point = version.source, version.entry_point
    source = normalize_source(source)
    if not source.strip():
        raise ApplicationError("The source is empty.", field="source")
    if len(source) > SOURCE_MAX_CHARS:
        raise ApplicationError(f"The source is longer than {SOURCE_MAX_CHARS:,} characters.", field="source")
    latest = function.latest_version
    entry_point = _check_entry_point(entry_point or (latest.entry_point if latest else "compute_score"))
    sha = source_sha256(source)
    if version is None:  # a draft that equals a saved version is recorded as that version
        version = function.versions.filter(sha256=sha, entry_point=entry_point).order_by("-number").first()
    mode, origin, samples = prepare_any(project=function.project, dataset_version=dataset_version, split=split,
                                        limit=limit, responses_text=responses_text, rollout_job_id=rollout_job_id,
                                        rollout_step=rollout_step, sample_model_id=sample_model_id)
    count = len(samples) if mode != "model" else len(_rows(dataset_version, split, limit or 20))
    with transaction.atomic():
        _check_active_limits(user, function.project)
        run = RewardTestRun.objects.create(
            function=function, version=version, source=source, sha256=sha, entry_point=entry_point,
            dataset_version=dataset_version if mode != "rollouts" else None, split=split, mode=mode,
            sample_count=count, limit=limit, responses_text=responses_text, rollout_job_id=rollout_job_id,
            rollout_step=rollout_step, sample_model_id=sample_model_id, origin=origin,
            state=RewardTestRunState.QUEUED, created_by=user)
        transaction.on_commit(lambda: _enqueue(run.pk))
    run.refresh_from_db()  # as stored now (a worker may already have it)
    return run


def reward_test_run_execute(*, run_id: int) -> RewardTestRun | None:
    """Run a queued test-run (on a worker); a redelivered or finished one is left alone."""
    claimed = RewardTestRun.objects.filter(pk=run_id, state=RewardTestRunState.QUEUED).update(
        state=RewardTestRunState.RUNNING, started_at=timezone.now())
    run = RewardTestRun.objects.select_related("function__project", "dataset_version__dataset", "version",
                                               "created_by").filter(pk=run_id).first()
    if not claimed or run is None:
        return run
    try:
        mode, origin, samples = prepare_any(
            project=run.function.project, dataset_version=run.dataset_version, split=run.split, limit=run.limit,
            responses_text=run.responses_text, rollout_job_id=run.rollout_job_id, rollout_step=run.rollout_step,
            sample_model_id=run.sample_model_id, generate=True)
        run.origin = origin or run.origin
    except ApplicationError as exc:  # the dataset (or run, or model) changed since the run was asked for
        scored = Scored(mode=run.mode, error=exc.message)
        samples = []
    else:
        def progress(done: int) -> None:
            RewardTestRun.objects.filter(pk=run_id).update(done_count=done)

        scored = score_samples(source=run.source, entry_point=run.entry_point, mode=mode, samples=samples,
                               on_progress=progress, wall_s=test_run_time_limit())
    with transaction.atomic():
        run.sample_count, run.done_count = len(samples), len(scored.results)
        if not scored.ok:
            run.state = RewardTestRunState.FAILED
        elif (scored.summary.get("all") or {}).get("errors"):
            run.state = RewardTestRunState.ERRORS  # it ran, but not every sample got a score: "N errors"
        else:
            run.state = RewardTestRunState.SUCCEEDED
        run.isolation, run.summary, run.results = scored.isolation, scored.summary, scored.results
        run.error, run.error_lineno, run.error_traceback = scored.error, scored.error_lineno, scored.error_traceback
        run.duration_ms, run.finished_at = scored.duration_ms, timezone.now()
        run.save()
        what = f"v{run.version.number}" if run.version else f"draft {run.sha256[:12]}"
        on = run.origin or (str(run.dataset_version) if run.dataset_version else "pasted responses")
        audit(actor=run.created_by, action="reward.test_run", project=run.function.project, obj=run,
              summary=f"Test-run of {run.function.name} {what} on {on}: "
                      f"{count(len(samples), 'sample')}, {run.state_words}")
    return run


def reward_file_check(*, source: str, entry_point: str = "compute_score", project=None, dataset_version=None,
                      split: str = "", limit: int | None = 20, responses_text: str = "",
                      rollout_job_id: int | None = None, rollout_step: int | None = None,
                      sample_model_id: int | None = None) -> dict:
    """The CLI/automation form of a test-run: nothing is stored, the outcome is returned as a dict
    (`errors`: samples that got no score; `reference_check`: ground truths scored against themselves)."""
    from webapp.rewards.services import validate_source

    entry_point = _check_entry_point(entry_point)
    source, warnings = validate_source(source, entry_point)
    mode, origin, samples = prepare_any(
        project=project or (dataset_version.project if dataset_version else None), dataset_version=dataset_version,
        split=split, limit=limit, responses_text=responses_text, rollout_job_id=rollout_job_id,
        rollout_step=rollout_step, sample_model_id=sample_model_id, generate=True)
    scored = score_samples(source=source, entry_point=entry_point, mode=mode, samples=samples)
    errors = int((scored.summary.get("all") or {}).get("errors") or 0)
    return {"sha256": source_sha256(source), "entry_point": entry_point, "warnings": warnings,
            "dataset_version": str(dataset_version) if dataset_version else None, "origin": origin,
            "errors": errors, "reference_check": mode == "reference" and any(
                s.role == "ground_truth" for s in samples), **scored.to_dict()}
