"""Periodic human evaluation: every N checkpoints a blind task opens (policy vs the previous checkpoint or
the base model on held-out prompts), assigned to the project's reviewers; the reward-vs-human gap check.

The schedule is the job's config["human_eval"] (set on the job form, checked by training.jobconfig):
{"every": N, "against": "previous" | "base", "items": K, "dataset_version": id | None, "split": "val" |
"train", "reward_rise": X, "max_new_tokens": T}. `schedule_process(job)` runs after every sync (hooks.py)
and is idempotent: one scheduled task per checkpoint (a unique constraint), however often it runs.
A worker generates both sides (`python -m training.pairgen`, same sampling for both) and opens the task.
"""
from __future__ import annotations

import logging
import os
import random
import subprocess
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from training.rundir import RunDir, read_jsonl, write_jsonl
from webapp.core.models import ROLE_RANK, Membership, Role
from webapp.core.queue import PREPARE_HUMAN_EVAL, enqueue
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetRow
from webapp.monitoring.models import HumanEvalItem, HumanEvalTask, Side
from webapp.notifications.services import notify
from webapp.runs.models import Checkpoint, CheckpointStatus, Job, MetricPoint, RunEvent

logger = logging.getLogger(__name__)
PAIRGEN_TIMEOUT_S = int(getattr(settings, "PAIRGEN_TIMEOUT_S", 25 * 60))
REWARD_METRIC = "critic/score/mean"
REWARD_WINDOW = 5  # the reward at a step: the mean of the last 5 logged values up to it
DEFAULT_RISE = 0.1
GAP_RULE = ("Flagged when the mean reward ({metric}, last {window} logged values) rose by more than {rise:g} "
            "since the compared checkpoint while people preferred the new checkpoint in at most half of the "
            "judged pairs and the 95 % interval of that human win rate lies wholly below 0.5.")


def schedule_of(job: Job) -> dict[str, Any] | None:
    sched = (job.config or {}).get("human_eval")
    if not isinstance(sched, dict) or not int(sched.get("every") or 0) >= 1:
        return None
    return sched


def gap_rule(sched: dict[str, Any] | None) -> str:
    rise = float((sched or {}).get("reward_rise", DEFAULT_RISE) or DEFAULT_RISE)
    return GAP_RULE.format(metric=REWARD_METRIC, window=REWARD_WINDOW, rise=rise)


def reviewers(project) -> list:
    """The project's reviewers; when it has none, every member who may review (engineers, admins)."""
    members = list(Membership.objects.filter(project=project).select_related("user"))
    exact = [m.user for m in members if m.role == Role.REVIEWER]
    return exact or [m.user for m in members if ROLE_RANK[Role(m.role)] >= ROLE_RANK[Role.REVIEWER]]


def _opponent(job: Job, ckpts: list[Checkpoint], k: int, sched: dict) -> tuple[str, int, str]:
    """(label, step, path) of what checkpoint number k (0-based) is compared with: "previous" is the
    checkpoint evaluated last time (N back), else the nearest earlier one still on disk, else the base."""
    if sched.get("against") != "base":
        back = k - int(sched["every"])
        for earlier in ([ckpts[back]] if back >= 0 else []) + [ckpts[j] for j in range(k - 1, -1, -1)]:
            if earlier.status == CheckpointStatus.AVAILABLE and Path(earlier.path).is_dir():
                return f"step {earlier.step}", earlier.step, earlier.path
    base = job.base_model.path if job.base_model_id and job.base_model else ""
    return "base model", 0, base


def _held_out_rows(job: Job, sched: dict) -> tuple[str, list[dict]]:
    limit = max(1, min(200, int(sched.get("items") or 20)))
    version_id = sched.get("dataset_version")
    if version_id:

        split = sched.get("split") or "val"
        rows = DatasetRow.objects.filter(version_id=version_id, version__dataset__project=job.project,
                                         split=split).order_by("index")[:limit]
        return f"dataset version #{version_id} ({split})", [
            {"prompt": r.prompt, "ground_truth": r.ground_truth or None, "data_source": r.data_source} for r in rows]
    path = RunDir(job.run_dir).data("val")
    return "the run's validation split", [
        {"prompt": r.get("prompt"), "ground_truth": r.get("ground_truth"), "data_source": r.get("data_source")}
        for r in read_jsonl(path)[:limit]]


def schedule_process(job: Job) -> list[HumanEvalTask]:
    """Open the scheduled tasks that are due (every N-th checkpoint); returns the new ones."""
    sched = schedule_of(job)
    if sched is None or not job.run_dir:
        return []
    every = int(sched["every"])
    ckpts = list(Checkpoint.objects.filter(job=job).order_by("step"))
    done = set(HumanEvalTask.objects.filter(checkpoint__job=job, scheduled=True).values_list("checkpoint_id",
                                                                                            flat=True))
    created = []
    for k, ckpt in enumerate(ckpts):
        if (k + 1) % every or ckpt.pk in done or ckpt.status != CheckpointStatus.AVAILABLE:
            continue
        try:
            task = _open_scheduled(job, ckpt, ckpts, k, sched)
        except IntegrityError:  # another sync opened it a moment ago
            continue
        if task is not None:
            created.append(task)
    return created


def _open_scheduled(job: Job, ckpt: Checkpoint, ckpts: list[Checkpoint], k: int, sched: dict):
    label, step, path = _opponent(job, ckpts, k, sched)
    source, rows = _held_out_rows(job, sched)
    with transaction.atomic():
        task = HumanEvalTask.objects.create(
            project=job.project, checkpoint=ckpt, scheduled=True, status="generating", opponent=label,
            opponent_step=step, source=source, sample_step=ckpt.step, is_open=False,
            title=f"Run #{job.pk} {job.name} · step {ckpt.step} vs {label}")
        folder = RunDir(job.run_dir).human_eval(task.pk)
        if not rows or not path:
            task.status = "failed"
            task.error = ("No held-out prompts: " + source) if not rows else "No opponent model on disk."
            task.save(update_fields=["status", "error", "updated_at"])
        else:
            write_jsonl(folder / "prompts.jsonl", rows)
            transaction.on_commit(lambda: enqueue(PREPARE_HUMAN_EVAL, task.pk, queue=job.queue or "cpu"))
        RunEvent.objects.create(job=job, kind="human_eval", step=ckpt.step,
                                message=f"Scheduled human evaluation of step {ckpt.step} vs {label} "
                                        f"({len(rows)} prompts from {source})", data={"task": task.pk})
    return task


def pairgen_command(task: HumanEvalTask, folder: Path, opponent_path: str) -> list[str]:
    from training.backends.base import python_executable

    job, sched = task.checkpoint.job, schedule_of(task.checkpoint.job) or {}
    cmd = [python_executable(), "-m", "training.pairgen", "--prompts", str(folder / "prompts.jsonl"),
           "--policy", task.checkpoint.path, "--opponent", opponent_path, "--out", str(folder / "pairs.jsonl"),
           "--max-new-tokens", str(int(sched.get("max_new_tokens") or 64)), "--seed", str(task.pk)]
    if job.base_model_id and job.base_model.path:
        cmd += ["--base-model", job.base_model.path]
    return cmd


def _opponent_path(task: HumanEvalTask) -> str:
    job = task.checkpoint.job
    if task.opponent_step:
        ck = Checkpoint.objects.filter(job=job, step=task.opponent_step).first()
        return ck.path if ck else ""
    return job.base_model.path if job.base_model_id else ""


def human_eval_prepare(*, task_id: int) -> HumanEvalTask:
    """Generate both sides of a scheduled task, fill its items (sides random), open it and assign it."""
    from training.backends.base import REPO_ROOT

    if not HumanEvalTask.objects.filter(pk=task_id, status="generating").update(status="preparing"):
        return HumanEvalTask.objects.get(pk=task_id)  # already done, or another worker has it
    task = HumanEvalTask.objects.select_related("checkpoint__job__base_model", "project").get(pk=task_id)
    folder = RunDir(task.checkpoint.job.run_dir).human_eval(task.pk)
    error = ""
    opponent = _opponent_path(task)
    if not opponent or not Path(opponent).is_dir():
        task.status, task.error = "failed", f"The opponent ({task.opponent}) is no longer on disk."
        task.save(update_fields=["status", "error", "updated_at"])
        return task
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
                                                      if p), "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(pairgen_command(task, folder, opponent), cwd=str(REPO_ROOT), env=env,
                              capture_output=True, text=True, timeout=PAIRGEN_TIMEOUT_S)
        (folder / "log.txt").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            error = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    except subprocess.TimeoutExpired:
        error = f"Generating the responses took longer than {PAIRGEN_TIMEOUT_S} s and was stopped."
    pairs = [] if error else read_jsonl(folder / "pairs.jsonl")
    if not error and not pairs:
        error = "The generator wrote no pairs."
    if error:
        task.status, task.error = "failed", error[:2000]
        task.save(update_fields=["status", "error", "updated_at"])
        return task
    return fill_scheduled(task, pairs)


@transaction.atomic
def fill_scheduled(task: HumanEvalTask, pairs: list[dict]) -> HumanEvalTask:
    """Items from generated pairs ({"prompt", "a": policy, "b": opponent, ...}); opens and assigns the task,
    and queues the run's reward (when it has one) as an automatic judge of the same pairs."""
    rng = random.Random(task.pk * 7919 + task.checkpoint_id)
    HumanEvalItem.objects.bulk_create([
        HumanEvalItem(task=task, index=i, prompt=str(p.get("prompt") or ""), policy_response=str(p.get("a") or ""),
                      reference_response=str(p.get("b") or ""), policy_side=rng.choice([Side.A, Side.B]),
                      ground_truth=p.get("ground_truth"), data_source=str(p.get("data_source") or ""))
        for i, p in enumerate(pairs)])
    task.status, task.is_open = "ready", True
    task.save(update_fields=["status", "is_open", "updated_at"])
    people = reviewers(task.project)
    task.assignees.set(people)
    job = task.checkpoint.job
    names = ", ".join(u.username for u in people) or "nobody (the project has no reviewers)"
    if (job.reward_spec or {}).get("components"):  # the run's own reward judges the same pairs, for the chart
        from webapp.monitoring.services.judges import judge_request

        try:
            judge_request(task=task, user=None, judge="reward")
        except ApplicationError as exc:
            logger.warning("no automatic judge for human evaluation %s: %s", task.pk, exc.message)
    notify(task.project, "human_eval.assigned", job=job,
           message=f"Blind human evaluation #{task.pk} of step {task.checkpoint.step} vs {task.opponent} "
                   f"({len(pairs)} pairs) is open for: {names}",
           data={"task": task.pk, "step": task.checkpoint.step, "reviewers": [u.username for u in people],
                 "url": f"/p/{task.project.slug}/monitor/human-evals/{task.pk}/review/"})
    return task


# -- the reward-vs-human gap -----------------------------------------------------------------------

def reward_at(job: Job, step: int, *, first: bool = False) -> float | None:
    """The mean of the last REWARD_WINDOW logged rewards up to `step` (the first ones when `first`)."""
    qs = MetricPoint.objects.filter(job=job, name=REWARD_METRIC, value__isnull=False)
    qs = qs.order_by("step") if first else qs.filter(step__lte=step).order_by("-step")
    vals = list(qs.values_list("value", flat=True)[:REWARD_WINDOW])
    return sum(vals) / len(vals) if vals else None


def gap_check(task: HumanEvalTask) -> dict[str, Any]:
    """Recompute the task's gap (stored on it); flags, notifies and logs once when it first holds."""
    from webapp.monitoring.selectors import human_eval_summary

    if task.opponent_step is None:
        return {}
    job = task.checkpoint.job
    sched = schedule_of(job) or {}
    threshold = float(sched.get("reward_rise", DEFAULT_RISE) or DEFAULT_RISE)
    after = reward_at(job, task.checkpoint.step)
    before = reward_at(job, task.opponent_step, first=task.opponent_step == 0)
    human = human_eval_summary(task)["human"]
    rise = None if after is None or before is None else after - before
    flagged = bool(rise is not None and rise > threshold and human.n and human.rate <= 0.5 and human.hi < 0.5)
    gap = {"metric": REWARD_METRIC, "before": before, "after": after, "rise": rise, "threshold": threshold,
           "human_rate": human.rate, "human_lo": human.lo, "human_hi": human.hi, "n": human.n, "flagged": flagged,
           "rule": gap_rule(sched)}
    task.gap = gap
    fields = ["gap", "updated_at"]
    newly = flagged and task.flagged_at is None
    if newly:
        task.flagged_at = timezone.now()
        fields.append("flagged_at")
    task.save(update_fields=fields)
    if newly:
        text = (f"Reward may be hacked: step {task.checkpoint.step}'s mean reward rose by {rise:.3f} since "
                f"{task.opponent}, but people preferred it in {human.rate:.0%} of {human.n} pairs "
                f"(95 % interval {human.lo:.2f}–{human.hi:.2f}).")
        RunEvent.objects.create(job=job, kind="reward_gap", step=task.checkpoint.step, message=text[:500],
                                data={"task": task.pk, **{k: v for k, v in gap.items() if k != "rule"}})
        notify(task.project, "human_eval.gap", job=job, message=text, data={"task": task.pk, "rise": rise,
                                                                              "human_rate": human.rate})
    return gap
