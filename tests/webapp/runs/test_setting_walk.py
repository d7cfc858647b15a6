"""How far one setting travels: `kl_coef` from the New job form's launch POST to the local loss and to VERL's
override, counted by tracing the real code (docs/architecture.md, "Following a setting").

A stop is a file of webapp/, training/ or jobs/ that the walk arrives in (a call, or a callee returning to it)
with a frame that holds the value, a dict or list carrying it, or a record (dataclass, namespace, model row,
form) with a field that does; lines that follow each other in one file are one stop. A return is a stop in a
file the walk had already left. The worker's launch and the local trainer run in this process, one step, so the
walk is followed through job.json as the trainer reads it.

The bounds are today's walk: shorten it, never lengthen it.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from tests.webapp.runs.test_runs_views import form_data

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
CODE = tuple(f"{ROOT / package}/" for package in ("webapp", "training", "jobs"))
RECORDS = ("webapp", "training", "jobs", "django.forms", "types")  # modules whose objects are records here
VALUE, TEXT = 0.0137, "0.0137"  # an unusual value, inside the advised range
VERL_KEY = "actor_rollout_ref.actor.kl_loss_coef"


def carries(obj, depth: int = 0, in_record: bool = False) -> bool:
    """The value itself, its text, a container holding it, or a record whose own field holds it."""
    if depth > 6:
        return False
    if isinstance(obj, float):
        return obj == VALUE
    if isinstance(obj, str):
        return TEXT in obj
    if isinstance(obj, dict):
        return any(carries(v, depth + 1, in_record) for v in list(dict.values(obj))[:500])
    if isinstance(obj, (list, tuple)):
        return any(carries(v, depth + 1, in_record) for v in obj[:500])
    if in_record or not (type(obj).__module__ or "").startswith(RECORDS):
        return False  # an object holding a record that holds the value is not a carrier itself
    if dataclasses.is_dataclass(obj) and not hasattr(obj, "__dict__"):
        fields = [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
    else:
        fields = list(getattr(obj, "__dict__", {}).values())
    return any(carries(v, depth + 1, True) for v in fields[:500])


def holds_verl_pair(frame) -> bool:
    def pair(v, depth=0):
        if isinstance(v, tuple) and len(v) == 2 and v[0] == VERL_KEY:
            return v[1] == VALUE
        return depth < 3 and isinstance(v, (list, tuple)) and any(pair(x, depth + 1) for x in v)
    return any(pair(v) for v in frame.f_locals.values())


class Walk:
    """sys.settrace over the project's code: the files the value is called into, in order, each with the function
    the walk arrived in."""

    def __init__(self, files: list[tuple[str, str]], until=None):
        self.files, self.until, self.done = files, until, False

    def _local(self, frame, event, arg):
        if self.done:
            return None
        name = frame.f_code.co_filename
        if event in ("call", "line") and (not self.files or self.files[-1][0] != name) and \
                carries(dict(frame.f_locals)):
            self.files.append((name, frame.f_code.co_name))
        if self.until is not None and self.until(frame, event):
            self.done = True
        return self._local

    def _global(self, frame, event, arg):
        return self._local(frame, event, arg) if not self.done and frame.f_code.co_filename.startswith(CODE) else None

    def __enter__(self):
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)


def count(files: list[tuple[str, str]]) -> tuple[int, int, str]:
    seen, returns, lines = set(), 0, []
    for name, function in files:
        again = name in seen
        returns += again
        seen.add(name)
        lines.append(f"{'  again ' if again else '        '}{name[len(str(ROOT)) + 1:]}  {function}")
    return len(files), returns, "\n".join(lines)


def walk_from_the_form(backend, project, engineer, as_user, prompts_version, tiny_model, reward_fn, until=None):
    from jobs.tasks import launch_job
    from webapp.runs import views
    from webapp.runs.models import Job

    client = as_user(engineer)
    review = client.post(f"/p/{project.slug}/jobs/new/", form_data(
        prompts_version, tiny_model, reward_fn, action="review", kl_coef=TEXT, max_steps=1, backend=backend))
    assert review.status_code == 200, review.content.decode()[:2000]
    posted = {**dict(review.context["hidden"]), "launch_token": str(review.context["launch_token"]),
              "action": "launch"}
    # The view is the first stop: it hands request.POST on (a request is not a record here, so no frame of the view
    # holds the value itself and the trace alone would start in the form).
    files = [(views.__file__, views.job_new.__name__)]
    with Walk(files):
        assert client.post(f"/p/{project.slug}/jobs/new/", posted).status_code == 302
    job = Job.objects.get()
    assert job.config["hp"]["kl_coef"] == VALUE
    with Walk(files, until) as worker:
        assert launch_job.run(job.pk) == "launched"
    job.refresh_from_db()
    return files, job, worker


def test_kl_coef_reaches_the_local_loss_in_at_most_17_stops_and_6_returns(
        project, engineer, as_user, prompts_version, tiny_model, reward_fn, no_enqueue, fake_supervisor):
    from training.local.train import run_job

    files, job, _ = walk_from_the_form("local", project, engineer, as_user, prompts_version, tiny_model, reward_fn)
    with Walk(files, until=lambda frame, event: event == "call" and frame.f_code.co_name == "policy_loss") as trainer:
        run_job(job.run_dir)
    assert trainer.done, "the local trainer never reached its loss"
    stops, returns, walk = count(files)
    print(f"kl_coef to the local loss: {stops} stops, {returns} returns\n{walk}")
    assert stops <= 17 and returns <= 6, walk


def test_kl_coef_reaches_the_verl_override_in_at_most_15_stops_and_4_returns(
        project, engineer, as_user, prompts_version, tiny_model, reward_fn, no_enqueue, fake_supervisor):
    files, _, worker = walk_from_the_form("verl", project, engineer, as_user, prompts_version, tiny_model, reward_fn,
                                          until=lambda frame, event: holds_verl_pair(frame))
    assert worker.done, f"no frame made the pair ({VERL_KEY}, {VALUE})"
    stops, returns, walk = count(files)
    print(f"kl_coef to VERL's {VERL_KEY}: {stops} stops, {returns} returns\n{walk}")
    assert stops <= 15 and returns <= 4, walk
