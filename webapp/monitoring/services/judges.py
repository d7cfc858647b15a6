"""Automatic judges on a human evaluation's or an arena's pairs: a Celery task runs `python -m training.judges`.

The judge runs in a subprocess, never in the worker: it loads models and runs user reward code (in the
sandbox). Its W/T/L, bootstrap interval and position-bias share are shown beside the human verdicts.
On a human evaluation the policy's response is judged against its opponent's; on an arena side B's
against side A's (the arena's results table counts B's wins).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.core.audit import audit
from webapp.core.queue import RUN_JUDGE, enqueue
from webapp.core.services import ApplicationError
from webapp.monitoring.models import Arena, EvaluationStatus, HumanEvalTask, JudgeKind, JudgeRun
from webapp.monitoring.services.arena import arenas_dir
from webapp.monitoring.services.work import claim
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.models import RunEvent

JUDGE_TIMEOUT_S = int(getattr(settings, "JUDGE_TIMEOUT_S", 25 * 60))


def _models(project):
    return ModelEntry.objects.filter(project=project).exclude(path="").order_by("name")


def _reward_job(task: HumanEvalTask | None, arena: Arena | None):
    """The run whose reward can judge: the task's run, or the run of an arena's side B checkpoint."""
    if task is not None:
        return task.checkpoint.job
    ckpt = arena.b_checkpoint if arena is not None and arena.b_checkpoint_id else None
    return ckpt.job if ckpt is not None else None


def judge_choices(task: HumanEvalTask | None = None, arena: Arena | None = None) -> list[tuple[str, str]]:
    """("reward" | "model:<id>", label): a run's reward when there is one, each registered local model."""
    job = _reward_job(task, arena)
    out = []
    if job is not None and (job.reward_spec or {}).get("components"):
        out.append(("reward", f"The reward of run #{job.pk} (sandboxed)"))
    for m in _models((task or arena).project):
        what = "reward model" if m.kind == ModelKind.REWARD_MODEL else "judge model, answers A or B"
        out.append((f"model:{m.pk}", f"{m.name} ({what})"))
    return out


@transaction.atomic
def judge_request(*, user, judge: str, task: HumanEvalTask | None = None, arena: Arena | None = None) -> JudgeRun:
    """Queue an automatic judge over the pairs of a human evaluation or an arena (each judged twice,
    positions swapped)."""
    if (task is None) == (arena is None):
        raise ApplicationError("Judge either a human evaluation or an arena.")
    if task is not None and (task.status != "ready" or not task.items.exists()):
        raise ApplicationError("This evaluation has no pairs to judge yet.")
    if arena is not None and (arena.status != EvaluationStatus.SUCCEEDED or not arena.pairs.exists()):
        raise ApplicationError("This arena has no generated pairs to judge yet.")
    job = _reward_job(task, arena)
    if judge == "reward":
        if job is None or not (job.reward_spec or {}).get("components"):
            raise ApplicationError("There is no run reward to judge with here.", field="judge")
        kind, label, path = JudgeKind.REWARD, f"reward of run #{job.pk}", ""
    elif isinstance(judge, str) and judge.startswith("model:") and judge[6:].isdigit():
        model = _models((task or arena).project).filter(pk=int(judge[6:])).first()
        if model is None:
            raise ApplicationError("Choose a model registered in this project with a local folder.", field="judge")
        kind = JudgeKind.REWARD_MODEL if model.kind == ModelKind.REWARD_MODEL else JudgeKind.JUDGE_MODEL
        label, path = model.name, model.path
    else:
        raise ApplicationError("Choose a judge: a run's reward or a registered model.", field="judge")
    if JudgeRun.objects.filter(task=task, arena=arena, label=label, model_path=path,
                               status__in=[EvaluationStatus.QUEUED, EvaluationStatus.RUNNING]).exists():
        raise ApplicationError(f"{label} is already judging these pairs.")
    run = JudgeRun.objects.create(task=task, arena=arena, kind=kind, label=label, model_path=path, created_by=user)
    target = task or arena
    audit(actor=user, action="judge.request", project=target.project, obj=target,
          summary=f"Asked {label} to judge {'human evaluation' if task else 'arena'} #{target.pk}",
          after={"judge_run": run.pk})
    queue_name = (job.queue if job is not None else "") or "cpu"
    transaction.on_commit(lambda: enqueue(RUN_JUDGE, run.pk, queue=queue_name))
    return run


def _pairs(run: JudgeRun) -> list[dict]:
    if run.task_id:
        return [{"id": i.index, "prompt": i.prompt, "a": i.policy_response, "b": i.reference_response,
                 "ground_truth": i.ground_truth, "data_source": i.data_source or "default"}
                for i in run.task.items.order_by("index")]
    return [{"id": p.index, "prompt": p.prompt_text, "a": p.response_b, "b": p.response_a}  # B's view
            for p in run.arena.pairs.order_by("index")]


def _judge_spec(run: JudgeRun) -> dict:
    if run.kind == JudgeKind.REWARD:
        from training.jobspec import JobSpecError, read_spec

        job = _reward_job(run.task, run.arena)
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


def judge_run(*, judge_run_id: int) -> JudgeRun:
    """Run the judge for a queued JudgeRun and store its summary (idempotent: claims the row first)."""
    from training.backends.base import REPO_ROOT
    from training.rundir import RunDir, write_json, write_jsonl

    run, claimed = claim(JudgeRun, judge_run_id, "task__checkpoint__job", "arena")
    if not claimed:
        return run
    task = run.task
    folder = RunDir(task.checkpoint.job.run_dir).judge(run.pk) if task else \
        arenas_dir() / str(run.arena_id) / "judges" / str(run.pk)
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
    if task is None:
        return run
    job = task.checkpoint.job
    rate = "no judged pairs" if run.win_rate is None else (
        f"W/T/L {run.wins}/{run.ties}/{run.losses}, win rate {run.win_rate:.3f} "
        f"[{run.win_rate_lo:.3f}, {run.win_rate_hi:.3f}]")
    RunEvent.objects.create(job=job, kind="judge", step=task.checkpoint.step,
                            message=f"{run.label} judged step {task.checkpoint.step} vs {task.opponent}: {rate}"[:500],
                            data={"judge_run": run.pk, "task": task.pk, "win_rate": run.win_rate})
    return run
