"""Automatic judges on a blind task's pairs: a Celery task runs `python -m training.judges`.

The judge runs in a subprocess, never in the worker: it loads models and runs user reward code (in the
sandbox). It judges side B's response against side A's (B's wins, as the task's results read), both
orders, and gets what the reward gets in training: the prompt, each pair's ground truth, data source and
extra info. Only judges that fit the pairs are offered; a judge that scored everything alike says so.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from training.judges import fit_problem
from webapp.core.audit import audit
from webapp.core.queue import RUN_JUDGE, enqueue
from webapp.core.services import ApplicationError
from webapp.monitoring.models import BlindSource, BlindTask, EvaluationStatus, JudgeKind, JudgeRun
from webapp.monitoring.services.work import claim
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.models import RunEvent

JUDGE_TIMEOUT_S = int(getattr(settings, "JUDGE_TIMEOUT_S", 25 * 60))


def blind_dir(task: BlindTask) -> Path:
    """Work files of a task without a run of its own (an arena's generation and judges)."""
    return Path(settings.MEDIA_ROOT) / "arenas" / str(task.pk)


def _models(project):
    return ModelEntry.objects.filter(project=project).exclude(path="").order_by("name")


def reward_job(task: BlindTask):
    """The run whose reward can judge: the run of side B's checkpoint (the policy, or an arena's B)."""
    return task.b_checkpoint.job if task.b_checkpoint_id else None


def _kind(model: ModelEntry) -> str:
    return JudgeKind.REWARD_MODEL if model.kind == ModelKind.REWARD_MODEL else JudgeKind.JUDGE_MODEL


def judge_choices(task: BlindTask) -> list[dict[str, Any]]:
    """Each judge that could judge these pairs: {"value", "label", "problem"}; `problem` says why one cannot
    (its context is too short for the pairs), and such a judge is shown but not offered."""
    job = reward_job(task)
    out = []
    if job is not None and (job.reward_spec or {}).get("components"):
        missing = "" if task.pairs.filter(ground_truth__isnull=False).exclude(ground_truth="").exists() else \
            " — these pairs carry no ground truth, which a reward that checks answers needs"
        out.append({"value": "reward", "label": f"The reward of run #{job.pk} (sandboxed){missing}", "problem": None})
    pairs = _pairs_for_fit(task)
    for m in _models(task.project):
        what = "reward model" if m.kind == ModelKind.REWARD_MODEL else "judge model, answers A or B"
        problem = fit_problem(_kind(m), Path(m.path), pairs, name=m.name)
        blocking = problem if _kind(m) == JudgeKind.JUDGE_MODEL else None
        label = f"{m.name} ({what})" + (f" — {problem}" if problem and not blocking else "")
        out.append({"value": f"model:{m.pk}", "label": label, "problem": blocking})
    return out


def _pairs_for_fit(task: BlindTask) -> list[dict[str, str]]:
    return [{"prompt": t, "a": a, "b": b} for t, a, b in task.pairs.values_list("prompt_text", "response_a",
                                                                                 "response_b")]


@transaction.atomic
def judge_request(*, user, judge: str, task: BlindTask) -> JudgeRun:
    """Queue an automatic judge over a task's pairs (each judged twice, positions swapped)."""
    if task.status != EvaluationStatus.SUCCEEDED or not task.pairs.exists():
        raise ApplicationError("This task has no generated pairs to judge yet.")
    job = reward_job(task)
    if judge == "reward":
        if job is None or not (job.reward_spec or {}).get("components"):
            raise ApplicationError("There is no run reward to judge with here.", field="judge")
        kind, label, path = JudgeKind.REWARD, f"reward of run #{job.pk}", ""
    elif isinstance(judge, str) and judge.startswith("model:") and judge[6:].isdigit():
        model = _models(task.project).filter(pk=int(judge[6:])).first()
        if model is None:
            raise ApplicationError("Choose a model registered in this project with a local folder.", field="judge")
        kind, label, path = _kind(model), model.name, model.path
        if kind == JudgeKind.JUDGE_MODEL:
            problem = fit_problem(kind, Path(path), _pairs_for_fit(task), name=model.name)
            if problem:
                raise ApplicationError(f"{model.name} cannot judge these pairs: {problem}", field="judge")
    else:
        raise ApplicationError("Choose a judge: a run's reward or a registered model.", field="judge")
    if JudgeRun.objects.filter(task=task, label=label, model_path=path,
                               status__in=[EvaluationStatus.QUEUED, EvaluationStatus.RUNNING]).exists():
        raise ApplicationError(f"{label} is already judging these pairs.")
    run = JudgeRun.objects.create(task=task, kind=kind, label=label, model_path=path, created_by=user)
    audit(actor=user, action="judge.request", project=task.project, obj=task,
          summary=f"Asked {label} to judge {task.get_source_display().lower()} #{task.pk}",
          after={"judge_run": run.pk})
    queue_name = (job.queue if job is not None else "") or "cpu"
    transaction.on_commit(lambda: enqueue(RUN_JUDGE, run.pk, queue=queue_name))
    return run


def judges_progress(task: BlindTask) -> dict[str, Any]:
    """For the page's live follower (window.wb.followProgress): the judges still queued or running."""
    active = list(task.judge_runs.filter(status__in=[EvaluationStatus.QUEUED, EvaluationStatus.RUNNING]))
    running = [r.label for r in active if r.status == EvaluationStatus.RUNNING]
    status = "running" if running else ("queued" if active else "finished")
    words = f"Judging on a worker: {', '.join(running)}…" if running else ""
    return {"status": status, "progress": 0.0 if active else 1.0, "finished": not active, "words": words,
            "active": [r.pk for r in active]}


def _pairs(run: JudgeRun) -> list[dict]:
    """B's view: `a` (the judges' policy) is side B's response, `b` side A's."""
    return [{"id": p.index, "prompt": p.prompt_text, "a": p.response_b, "b": p.response_a,
             "ground_truth": p.ground_truth, "data_source": p.data_source or "default",
             "extra_info": p.extra_info or {}}
            for p in run.task.pairs.order_by("index")]


def _judge_spec(run: JudgeRun) -> dict:
    if run.kind == JudgeKind.REWARD:
        from training.jobspec import JobSpecError, read_spec

        job = reward_job(run.task)
        try:
            spec = read_spec(Path(job.run_dir))
        except JobSpecError as exc:
            raise ApplicationError(f"The run's job.json is unreadable: {exc}") from None
        return {"kind": "reward", "reward": spec.reward.to_dict(), "run_dir": str(job.run_dir),
                "sandbox": spec.sandbox, "tie_tolerance": float((job.config or {}).get("hp", {}).get(
                    "tie_tolerance", 1e-6) or 1e-6)}
    return {"kind": str(run.kind), "path": run.model_path}


def judge_command(pairs: Path, judge: Path, out: Path, seed: int) -> list[str]:
    from training.backends.base import python_executable

    return [python_executable(), "-m", "training.judges", "--pairs", str(pairs), "--judge", str(judge),
            "--out", str(out), "--device", "auto", "--seed", str(seed)]


def _folder(run: JudgeRun) -> Path:
    from training.rundir import RunDir

    job = reward_job(run.task)
    if run.task.source != BlindSource.ARENA and job is not None and job.run_dir:
        return RunDir(job.run_dir).judge(run.pk)
    return blind_dir(run.task) / "judges" / str(run.pk)


def judge_run(*, judge_run_id: int) -> JudgeRun:
    """Run the judge for a queued JudgeRun and store its summary (idempotent: claims the row first)."""
    from training.backends.base import REPO_ROOT
    from training.rundir import write_json, write_jsonl

    run, claimed = claim(JudgeRun, judge_run_id, "task__b_checkpoint__job")
    if not claimed:
        return run
    folder = _folder(run)
    error, result = "", {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_jsonl(folder / "pairs.jsonl", _pairs(run))
        write_json(folder / "judge.json", _judge_spec(run))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
                                                          if p), "PYTHONUNBUFFERED": "1"}
        proc = subprocess.run(judge_command(folder / "pairs.jsonl", folder / "judge.json", folder / "result.json",
                                            seed=run.pk), cwd=str(REPO_ROOT), env=env, capture_output=True,
                              text=True, timeout=JUDGE_TIMEOUT_S)
        (folder / "log.txt").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            error = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        else:
            result = json.loads((folder / "result.json").read_text())
    except ApplicationError as exc:
        error = exc.message
    except subprocess.TimeoutExpired:
        error = f"The judge took longer than {JUDGE_TIMEOUT_S} s and was stopped."
    except (OSError, ValueError) as exc:
        error = f"The judge wrote no readable result: {exc}"
    run.finished_at = timezone.now()
    if error:
        run.status, run.error = EvaluationStatus.FAILED, error[:2000]
        run.save()
        return run
    s = result.get("summary") or {}
    run.status = EvaluationStatus.SUCCEEDED
    run.wins, run.ties, run.losses, run.n = (int(s.get(k) or 0) for k in ("wins", "ties", "losses", "n"))
    run.win_rate, run.win_rate_lo, run.win_rate_hi = s.get("win_rate"), s.get("lo"), s.get("hi")
    run.inconsistent, run.unjudged = int(s.get("inconsistent") or 0), int(s.get("unjudged") or 0)
    run.result = s
    run.save()
    _log_on_run(run)
    return run


def _log_on_run(run: JudgeRun) -> None:
    task = run.task
    if task.source == BlindSource.ARENA or task.b_checkpoint_id is None:
        return  # an arena is not a run's event
    step = task.b_checkpoint.step
    rate = "no judged pairs" if run.win_rate is None else (
        f"W/T/L {run.wins}/{run.ties}/{run.losses}, win rate {run.win_rate:.3f} "
        f"[{run.win_rate_lo:.3f}, {run.win_rate_hi:.3f}]")
    RunEvent.objects.create(job=task.b_checkpoint.job, kind="judge", step=step,
                            message=f"{run.label} judged step {step} vs {task.opponent}: {rate}"[:500],
                            data={"judge_run": run.pk, "task": task.pk, "win_rate": run.win_rate})
