"""SmolLM2-135M through the app on both backends, with a real worker: a GRPO job (short responses) of two steps
launched as the New job form launches it, on the local backend (LoRA) and on VERL's CPU rehearsal (full
fine-tuning: its CPU rollout syncs full weights only); each logs finite losses and a gradient on both steps, and
leaves a checkpoint the checkpoint table lists.

The model is the session's conversion (tests/smollm2_support.py); the responses are 16 tokens, so a job is a minute
or two of training after the worker starts it (VERL adds its private Ray cluster's start)."""
from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from tests.webapp.runs.test_verl_cpu_run import _check_ended_clean
from webapp.runs.models import JobState, MetricPoint

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
TIMEOUT_S = 1500  # a guard against a hang only: a loaded 2-core machine starts Ray and loads the model slowly
HP = {"batch_size": 2, "group_size": 2, "max_steps": 2, "save_freq": 2, "test_freq": 0, "max_response_length": 16,
      "max_seq_len": 208, "micro_batch_size": 4}
# Partial credit by the answer's length: the two answers of a group score differently, so a step has a gradient.
LENGTH_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    # longer worked answers score higher, up to 0.4; the right final answer scores 1
    text = str(solution_str)
    if text.strip().endswith(str(ground_truth)):
        return 1.0
    return 0.4 * min(len(text), 200) / 200
'''


@pytest.fixture
def smollm2_inputs(project, smollm2_dir):
    from tests.webapp.runs.conftest import make_version
    from training import wordproblems
    from webapp.datasets.models import DatasetKind
    from webapp.registry.models import ModelEntry, ModelKind
    from webapp.rewards.services import reward_function_create

    train, val = wordproblems.generate(8, 2, seed=11)
    version = make_version(project, "word-problems", DatasetKind.PROMPTS, train, val)
    model = ModelEntry.objects.create(project=project, name="smollm2-135m-instruct", kind=ModelKind.CAUSAL_LM,
                                      path=str(smollm2_dir))
    fn = reward_function_create(project=project, user=None, name="length", source=LENGTH_REWARD)
    return {"project": project, "dataset_version": version, "base_model": model,
            "reward_spec": {"shaping": "raw", "components": [{"type": "function", "version_id": fn.latest_version.pk,
                                                              "weight": 1.0}]}}


def _run(job, worker):
    from webapp.runs.services.sync import sync_job

    deadline = time.time() + TIMEOUT_S
    while time.time() < deadline:
        job.refresh_from_db()
        if job.run_dir:
            sync_job(job)
            job.refresh_from_db()
        if job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.LOST, JobState.CANCELLED):
            break
        time.sleep(2)
    log = ""
    if job.run_dir:
        logs = sorted(Path(job.run_dir).glob("attempts/*/log.txt"))
        log = logs[-1].read_text()[-4000:] if logs else ""
    assert job.state == JobState.SUCCEEDED, (job.state, job.error[-1500:], log, worker.log_path.read_text()[-2000:])
    return job


def _series(job, name: str) -> dict[int, float]:
    return dict(MetricPoint.objects.filter(job=job, name=name).values_list("step", "value"))


@pytest.mark.parametrize("backend, preset", [("local", "smollm2-cpu-lora"),
                                             ("verl", "smollm2-cpu")])  # VERL's CPU rollout syncs full weights only
def test_two_grpo_steps_of_smollm2_on_each_backend(backend, preset, engineer, smollm2_inputs, celery_worker_proc,
                                                   stop_runs):
    if backend == "verl":
        pytest.importorskip("verl")
    from webapp.runs.services import job_create

    job = job_create(user=engineer, kind="grpo", backend=backend, preset=preset, hp_overrides=HP,
                     include_unreviewed=True, **smollm2_inputs)
    assert job.config["hp"]["lora"]["rank"] == (16 if preset.endswith("lora") else 0)
    assert job.config["hp"]["device"] == "cpu"
    job = _run(job, celery_worker_proc)

    loss = _series(job, "actor/pg_loss")
    grad = _series(job, "actor/grad_norm")
    reward = _series(job, "critic/score/mean")
    assert sorted(loss) == sorted(grad) == sorted(reward) == [1, 2], (loss, grad, reward)
    assert all(math.isfinite(v) for v in [*loss.values(), *reward.values()])
    assert all(math.isfinite(v) and v > 0 for v in grad.values())  # the answers' scores differ: a gradient
    assert all(0 < v <= 1 for v in reward.values())
    if backend == "verl":  # the preset reuses the rollout's log-probs: no old-policy pass, and they are the trainer's
        ppo_kl = _series(job, "actor/ppo_kl")
        old_pass, ref_pass = _series(job, "timing_s/old_log_prob"), _series(job, "timing_s/ref")
        assert all(old_pass[s] < ref_pass[s] / 10 for s in (1, 2)), (old_pass, ref_pass)  # a copy, not a forward
        assert sorted(ppo_kl) == [1, 2] and all(abs(v) < 1e-3 for v in ppo_kl.values()), ppo_kl
        _check_ended_clean(Path(job.run_dir), 1)  # its private Ray and scratch folders are gone
    assert list(job.checkpoints.values_list("step", flat=True)) == [2]
    ckpt = Path(job.checkpoints.get().path)
    assert ckpt.is_dir() and any(p.stat().st_size > 0 for p in ckpt.rglob("*") if p.is_file())
