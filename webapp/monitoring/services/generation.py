"""Generating both sides of a blind task, one way for every source: a worker runs `python -m training.arena` in a
subprocess (the one generation interface, training.generation) on the task's prompts with its sampling settings,
prompt i seeded with seed + i on both sides, and stores the pairs all at once, each with the prompt row's ground
truth, data source and extra info. Idempotent: the task is claimed first.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from training.rundir import RunDir
from webapp.monitoring.models import BlindPair, BlindSource, BlindTask, EvaluationStatus
from webapp.monitoring.services.blind import new_pair
from webapp.monitoring.services.judges import blind_dir
from webapp.monitoring.services.work import claim

GENERATION_TIMEOUT_S = int(getattr(settings, "ARENA_TIMEOUT_S", 30 * 60))


def work_dir(task: BlindTask) -> Path:
    """A periodic task works in its run's folder (human_evals/<id>/); others in the media folder."""
    if task.source == BlindSource.PERIODIC and task.b_checkpoint_id and task.b_checkpoint.job.run_dir:
        return RunDir(task.b_checkpoint.job.run_dir).human_eval(task.pk)
    return blind_dir(task)


def prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" if isinstance(m, dict) else str(m)
                         for m in prompt)
    return json.dumps(prompt)


def generation_command(spec_file: Path, out_file: Path) -> list[str]:
    from training.backends.base import python_executable

    return [python_executable(), "-m", "training.arena", "--spec", str(spec_file), "--out", str(out_file)]


def _json(line: str) -> dict:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _run(task: BlindTask, work: Path) -> tuple[str, str, list[dict]]:
    """(error, engine, output lines) of the generator subprocess; progress is stored as it reports it."""
    from training.backends.base import REPO_ROOT

    spec = {"sides": {k: {"path": v.get("path"), "base_model": v.get("base_model")} for k, v in task.sides.items()},
            "prompts": [r["prompt"] for r in task.prompts], "sampling": task.sampling, "seed": task.seed}
    (work / "spec.json").write_text(json.dumps(spec))
    out = work / "pairs.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH")] if p),
           "PYTHONUNBUFFERED": "1"}
    log = work / "log.txt"
    engine = ""
    with open(log, "w") as err:  # a file, not a pipe: a chatty stderr must not block the child
        proc = subprocess.Popen(generation_command(work / "spec.json", out), cwd=str(REPO_ROOT), env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        timed_out: list[bool] = []
        watchdog = threading.Timer(GENERATION_TIMEOUT_S, lambda: (timed_out.append(True), proc.kill()))
        watchdog.start()
        for line in proc.stdout:
            msg = _json(line)
            if "progress" in msg:
                BlindTask.objects.filter(pk=task.pk).update(progress=float(msg["progress"]))
            engine = msg.get("engine", engine)
        code = proc.wait()
        watchdog.cancel()
    if timed_out:
        return f"The generation took longer than {GENERATION_TIMEOUT_S} s and was stopped.", engine, []
    if code != 0:
        return ([ln for ln in log.read_text().splitlines() if ln.strip()] or [f"exit {code}"])[-1], engine, []
    return "", engine, [json.loads(x) for x in out.read_text().splitlines() if x.strip()]


def generate(*, task_id: int) -> tuple[BlindTask, bool]:
    """(the task, whether this call generated it): both sides' responses stored as its pairs, or the task failed
    with the reason. A task already claimed by another call is returned as it is."""
    task, claimed = claim(BlindTask, task_id, "b_checkpoint__job")
    if not claimed:
        return task, False
    missing = [task.label(k) for k, side in task.sides.items() if not side.get("path")
               or not Path(side["path"]).exists()]
    error, engine, lines = "", "", []
    if missing:
        error = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} no longer on disk."
    else:
        work = work_dir(task)
        try:
            work.mkdir(parents=True, exist_ok=True)
            error, engine, lines = _run(task, work)
        except (OSError, ValueError) as exc:
            error = f"The generation stopped: {exc}"
    task.finished_at = timezone.now()
    if error or len(lines) != len(task.prompts):
        task.status, task.error = EvaluationStatus.FAILED, (error or "The generator wrote too few pairs.")[:2000]
        task.save()
        return task, True
    with transaction.atomic():
        BlindPair.objects.filter(task=task).delete()
        BlindPair.objects.bulk_create([
            new_pair(task, i, response_a=r["a"]["text"], response_b=r["b"]["text"], prompt=row["prompt"],
                     prompt_text=prompt_text(row["prompt"]), truncated_a=bool(r["a"]["truncated"]),
                     truncated_b=bool(r["b"]["truncated"]), seed=int(r["seed"]), ground_truth=row.get("ground_truth"),
                     data_source=str(row.get("data_source") or ""), extra_info=row.get("extra_info") or {})
            for i, (r, row) in enumerate(zip(lines, task.prompts, strict=True))])
        task.status, task.progress, task.engine = EvaluationStatus.SUCCEEDED, 1.0, engine[:16]
        task.save()
    return task, True
