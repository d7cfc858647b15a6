"""Test-run samples from outside the dataset: a run's stored rollouts, or responses sampled from a model.

A reference check (a prompt set without responses) only scores each ground truth against itself; these
give the reward real responses instead:
- stored rollouts: the rows of `samples/rollout/<step>.jsonl` of a job of the same project
  ({"input", "output", "gts", "score", ...}; read with training.ingest.read_samples);
- sampled responses: a registered causal LM of the project answers the first N prompts of a prompt set
  (training.generation), on the worker that runs the test-run.

Runs are the runs app's: it registers how to find a project's run folders (`register_run_finder`, called
from `RunsConfig.ready` with `webapp.runs.selectors.rollout_run_dirs`), so this app imports nothing of it and
never walks the runs folder itself.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from training.generation import GenerationError, load_generator
from training.ingest import read_samples, sample_steps
from training.rundir import RunDir
from webapp.core.text import count
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards import samples as sample_lib

MAX_LISTED_RUNS = 30
SAMPLE_MAX_RESPONSE_LENGTH = 128


# (project, job id or None, at most N) -> [(job id, label, run dir)], newest first; set by the runs app.
RunFinder = Callable[..., list[tuple[int, str, RunDir]]]
_finder: RunFinder | None = None


def register_run_finder(finder: RunFinder) -> None:
    global _finder
    _finder = finder


def _runs(project, job_id: int | None = None, limit: int | None = None) -> list[tuple[int, str, RunDir]]:
    return _finder(project, job_id=job_id, limit=limit) if _finder is not None else []


def rollout_runs(*, project) -> list[dict[str, Any]]:
    """The project's newest jobs with stored rollouts: [{"id", "label", "steps"}]."""
    out = []
    for job_id, label, run in _runs(project, limit=MAX_LISTED_RUNS):
        try:
            steps = sample_steps(run.path, "rollout")
        except (OSError, ValueError):
            continue
        if steps:
            out.append({"id": job_id, "label": f"{label} · rollouts of steps {steps[0]}–{steps[-1]}", "steps": steps})
    return out


def rollout_samples(*, project, job_id: int, step: int | None, limit: int) -> tuple[str, list[sample_lib.Sample]]:
    """(origin words, samples) of the first `limit` rows of a job's rollout dump (`step` None: the latest)."""
    found = _runs(project, job_id=job_id)
    if not found:
        raise sample_lib.SampleError(f"No run #{job_id} with a run directory in this project.")
    _, label, run = found[0]
    steps = sample_steps(run.path, "rollout")
    if not steps:
        raise sample_lib.SampleError(f"Run #{job_id} has no stored rollouts (samples/rollout/ is empty).")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise sample_lib.SampleError(f"Run #{job_id} has no rollouts of step {step}; steps with rollouts: "
                                     f"{steps[0]}–{steps[-1]}.")
    rows = read_samples(run.path, "rollout", step)[:limit]
    samples = []
    for i, row in enumerate(rows):
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        samples.append(sample_lib.Sample(
            item={"data_source": str(row.get("data_source") or ""), "solution_str": str(row.get("output") or ""),
                  "ground_truth": row.get("gts", ""), "extra_info": extra},
            role="rollout", row_index=i, prompt=str(row.get("input") or ""),
            meta={"stored_score": row.get("score")}))
    if not samples:
        raise sample_lib.SampleError(f"The rollouts of run #{job_id} at step {step} are empty.")
    return f"run {label}, rollouts of step {step}", samples


def sample_models(*, project):
    """The project's causal LMs with a local folder (they can answer prompts on a worker)."""
    return ModelEntry.objects.filter(project=project, kind=ModelKind.CAUSAL_LM).exclude(path="").order_by("name")


def model_samples(*, project, model_id: int, rows: list[dict[str, Any]],
                  generate: bool = True) -> tuple[str, list[sample_lib.Sample]]:
    """(origin words, samples): the model's answer to each row's prompt, scored against its ground truth.

    With `generate=False` only the choice is checked (no model is loaded: the request does this; the
    worker generates)."""
    model = sample_models(project=project).filter(pk=model_id).first()
    if model is None:
        raise sample_lib.SampleError(f"No causal LM #{model_id} with a local folder in this project.")
    if not rows:
        raise sample_lib.SampleError("The chosen dataset version has no rows in that split.")
    origin = (f"{count(len(rows), 'response')} sampled from {model.name} "
              f"(greedy, at most {SAMPLE_MAX_RESPONSE_LENGTH} tokens)")
    if not generate:
        return origin, []
    prompts = [row.get("prompt") if isinstance(row.get("prompt"), list) else row.get("prompt_text", "")
               for row in rows]
    try:
        with load_generator(model.path) as generator:
            outputs = generator.generate(prompts, n=1, max_response_length=SAMPLE_MAX_RESPONSE_LENGTH, temperature=0.0,
                                         seed=0)
    except (GenerationError, OSError, ValueError) as exc:
        raise sample_lib.SampleError(f"{model.name} could not answer the prompts: {exc}") from None
    samples = []
    for row, gens in zip(rows, outputs, strict=True):
        text = gens[0].text if gens else ""
        samples.append(sample_lib.Sample(
            item={"data_source": row.get("data_source", ""), "solution_str": text,
                  "ground_truth": row.get("ground_truth", ""), "extra_info": row.get("extra_info") or {}},
            role="sampled", row_index=row["index"], prompt=row.get("prompt_text", ""),
            meta={"truncated": bool(gens and gens[0].truncated)}))
    return origin, samples
