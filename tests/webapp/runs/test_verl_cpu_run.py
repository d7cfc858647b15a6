"""VERL's real trainer through the app on CPU: a Celery worker launches `verl.trainer.main_ppo` (GRPO,
the demo model, the CPU plugin) under the supervisor; the sync ingests VERL's file logger and lists
`global_step_N`; the checkpoint exports through VERL's model merger to an HF folder that generates; a killed
supervisor ends as lost and the job resumes from its last checkpoint; cancel leaves no Ray process. VERL's V1
trainer (the default) runs all of it, in one run and its resume; the legacy trainer, a choice on the form, runs to
its end. A rollback child resuming from a VERL checkpoint: test_verl_ray_cluster (each launch costs minutes of CI).

Each launch starts a private Ray cluster: about a minute per launch on two cores."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")

from tests.webapp.monitoring.conftest import job_inputs  # noqa: E402
from webapp.runs.models import Checkpoint, Job, JobState, MetricPoint  # noqa: E402

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
# A run's wait ends at its event; what fails it is a hang: nothing new in the run's log or metrics, its state or
# step for STALL_S (at load 14 on two cores a Ray worker took 9 minutes between two log lines, and a two-node run
# 30 minutes to its first step), or LAUNCH_LIMIT_S in all.
STALL_S = 1800
LAUNCH_LIMIT_S = 4 * 3600
HP = {"batch_size": 16, "group_size": 2, "max_steps": 2, "save_freq": 2, "test_freq": 0, "lr": 1e-3,
      "kl_coef": 0.02}


@pytest.fixture
def demo_model(settings):
    import torch

    from training.demo import build_demo_model

    torch.set_num_threads(1)
    return build_demo_model(Path(settings.MODELS_ROOT) / "demo-tiny")


@pytest.fixture
def inputs(project, demo_model):
    """The demo sums, the registered demo model and the near-miss reward (gradient from step 1)."""
    from training.demo import NEAR_MISS_SOURCE
    from webapp.rewards.services import reward_function_create

    data = job_inputs(project, demo_model)
    fn = reward_function_create(project=project, user=None, name="near-miss", source=NEAR_MISS_SOURCE)
    data["reward_spec"] = {"shaping": "raw", "components": [
        {"type": "function", "version_id": fn.latest_version.pk, "weight": 1.0}]}
    return data


def _ray_processes(run_dir: Path) -> list[str]:
    """Command lines that still name one of this run's private Ray temp dirs."""
    from training.verl_cpu import ray_temp_dir

    dirs = [ray_temp_dir(run_dir, n) for n in range(1, 4)]
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if any(d in cmd for d in dirs):
                found.append(cmd[:200])
    return found


def _progress(job: Job) -> tuple:
    """What moves while a run is alive: its state and step, the size of each attempt's log and metrics."""
    files = sorted(Path(job.run_dir).glob("attempts/*/*.txt")) + sorted(Path(job.run_dir).glob("attempts/*/*.jsonl")) \
        if job.run_dir else []
    sizes = []
    for path in files:
        with contextlib.suppress(OSError):
            sizes.append((path.name, path.stat().st_size))
    return job.state, job.last_step, tuple(sizes)


def _run_until(job: Job, done, what: str, worker, timeout: float | None = None) -> Job:
    """Sync the job like beat does, every second, until `done(job)`. Without `timeout` the wait lasts while the
    run moves (`_progress`): it fails after STALL_S without a change, however busy the machine, or LAUNCH_LIMIT_S."""
    from webapp.runs.services.sync import sync_job

    start = changed = time.monotonic()
    seen = None
    guard = ""
    while not guard:
        job.refresh_from_db()
        if job.run_dir:
            sync_job(job)
            job.refresh_from_db()
        if done(job):
            return job
        if job.state in (JobState.FAILED, JobState.LOST):
            break
        now, mark = time.monotonic(), _progress(job)
        if mark != seen:
            seen, changed = mark, now
        if timeout is not None:
            guard = f"not within {timeout:.0f} s" if now - start > timeout else ""
        elif now - changed > STALL_S:
            guard = f"no progress for {STALL_S} s"
        elif now - start > LAUNCH_LIMIT_S:
            guard = f"not within {LAUNCH_LIMIT_S} s"
        time.sleep(1)
    log = ""
    attempts = sorted(Path(job.run_dir).glob("attempts/*/log.txt")) if job.run_dir else []
    if attempts:
        log = attempts[-1].read_text()[-4000:]
    raise AssertionError(f"{what}: job #{job.pk} is {job.state} {guard} ({job.error[-1500:]!r})\n{log}\n"
                         f"worker: {worker.log_path.read_text()[-2000:]}")


def _metrics(job: Job, name: str) -> dict[int, float]:
    return dict(MetricPoint.objects.filter(job=job, name=name).values_list("step", "value"))


def _check_export(export, tmp_path: Path, base_model: Path, worker) -> None:
    """The zip the checkpoint table offers: an HF folder that transformers loads and that generates."""
    import zipfile

    import torch
    from transformers import AutoModelForCausalLM

    from training.models import load_tokenizer
    from webapp.monitoring.models import EvaluationStatus

    deadline = time.time() + 300
    while export.status in (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING) and time.time() < deadline:
        time.sleep(1)
        export.refresh_from_db()
    assert export.status == EvaluationStatus.SUCCEEDED, (export.error, worker.log_path.read_text()[-2000:])
    folder = tmp_path / "exported"
    zipfile.ZipFile(export.path).extractall(folder)
    model, tok = AutoModelForCausalLM.from_pretrained(folder), load_tokenizer(folder)
    base = AutoModelForCausalLM.from_pretrained(base_model)
    changed = max((a - b).abs().max().item() for a, b in zip(model.state_dict().values(),
                                                               base.state_dict().values(), strict=True))
    assert changed > 0  # the trained weights, not the base model's
    ids = tok("2+3=", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    assert tok.decode(out[0][ids.input_ids.shape[1]:], skip_special_tokens=True).strip()


def _check_rollout_store(job, run_dir: Path, steps: list[int]) -> None:
    """VERL's rollout dumps hold our reward wrapper's columns; read back, they give the local backend's keys
    and series, and the plotted total is the mean of the scores the advantages were computed from."""
    from training import ingest, rollouts

    assert set(steps) <= set(rollouts.steps(run_dir))
    for step in steps:
        rows = ingest.read_samples(run_dir, "rollout", step)
        assert len(rows) == HP["batch_size"] * HP["group_size"]
        assert len({r["uid"] for r in rows}) == HP["batch_size"]
        assert _metrics(job, "critic/rewards/mean")[step] == pytest.approx(
            sum(r["score"] for r in rows) / len(rows), abs=1e-5)
        near = [r["components"]["near_miss_v1"] for r in rows]
        assert _metrics(job, "reward/near_miss_v1/mean")[step] == pytest.approx(sum(near) / len(near), abs=1e-6)
        assert _metrics(job, "reward/near_miss_v1/error_share")[step] == 0.0
        assert all(r["score"] == pytest.approx(r["components"]["near_miss_v1"]) for r in rows)


def test_verl_grpo_on_cpu_with_the_legacy_trainer(project, engineer, inputs, celery_worker_proc, stop_runs):
    """The form's other trainer: a run to its end (a rollback child keeps it: test_runs_services)."""
    from webapp.runs.services import job_create

    job = job_create(project=project, user=engineer, kind="grpo", backend="verl", preset="demo-cpu",
                     hp_overrides={**HP, "verl.use_v1": False}, include_unreviewed=True, **inputs)
    assert job.queue == "cpu" and job.config["hp"]["device"] == "cpu" and job.config["verl"]["use_v1"] is False
    job = _run_until(job, lambda j: j.state == JobState.SUCCEEDED, "the VERL job", celery_worker_proc)
    run_dir = Path(job.run_dir)
    assert "trainer.use_v1=False" in (run_dir / "attempts" / "1" / "launch.json").read_text()
    assert "TaskRunnerV1" not in (run_dir / "attempts" / "1" / "log.txt").read_text()
    assert list(job.checkpoints.values_list("step", flat=True)) == [2]
    assert (run_dir / "checkpoints" / "global_step_2" / "actor").is_dir()
    _check_steps(job, run_dir, [1, 2])
    _check_ended_clean(run_dir, 1)


def test_verl_v1_run_lost_then_exported_then_resumed_and_cancelled(project, engineer, inputs, settings, tmp_path,
                                                                   celery_worker_proc, stop_runs):
    """The default trainer through a run's life: a killed supervisor ends the run as lost (the sync stops the Ray
    it left); its checkpoint exports; the lost run resumes from its last checkpoint and cancel stops it and its Ray.
    One run and one resume: each VERL launch costs minutes (a rollback child: test_verl_ray_cluster)."""
    import signal

    from webapp.monitoring.services.export import export_request
    from webapp.runs.services import job_cancel, job_create, job_resume

    settings.RUN_HEARTBEAT_STALE_S = 8  # the sync in this process gives the run up sooner
    job = job_create(project=project, user=engineer, kind="grpo", backend="verl", preset="demo-cpu",
                     hp_overrides={**HP, "max_steps": 500}, include_unreviewed=True, **inputs)
    assert job.queue == "cpu" and job.config["hp"]["device"] == "cpu" and job.config["verl"]["use_v1"] is True
    # step 2's metrics line is the step's last write, after its checkpoint
    job = _run_until(job, lambda j: j.checkpoints.filter(step=2).exists() and MetricPoint.objects.filter(
        job=j, step=2, name="training/rollout_probs_diff_max").exists(), "the first checkpoint", celery_worker_proc)
    run_dir = Path(job.run_dir)
    assert _ray_processes(run_dir)  # a live private Ray cluster
    first = run_dir / "attempts" / "1"
    assert "trainer.use_v1=True" in (first / "launch.json").read_text()  # the default trainer
    # It listens on loopback only: GCS, raylet, object manager, agents, metrics, workers, the trainer's store,
    # TransferQueue's controller and storage unit (ZMQ).
    supervisor_pid = int((first / "supervisor.pid").read_text())
    listeners = _listeners(supervisor_pid)
    assert len(listeners) >= 5, listeners
    assert all(ip.startswith("127.") or ip in ("::1", "::ffff:127.0.0.1") for _name, ip, _port in listeners), listeners
    # V1's batch store is among them (TransferQueue binds to Ray's node address)
    assert {"ray::TransferQueueController", "ray::SimpleStorageUnit"} <= {n for n, _ip, _port in listeners}, listeners
    # Ray starts workers at nice 15; on CPU they are the training, so they keep the supervisor's priority.
    workers = _ray_worker_niceness(supervisor_pid)
    assert workers and set(workers.values()) == {os.getpriority(os.PRIO_PROCESS, 0)}, workers
    os.kill(supervisor_pid, signal.SIGKILL)  # the worker's host loses it
    job = _run_until(job, lambda j: j.state == JobState.LOST, "lost", celery_worker_proc, timeout=120)
    assert not _ray_processes(run_dir)  # the sync stopped what the dead supervisor left
    assert not any(Path(d).exists() for d in _scratch(run_dir, 1))
    _check_steps(job, run_dir, [1, 2])

    # The checkpoint table's export: the worker merges VERL's checkpoint into an HF folder.
    export = export_request(checkpoint=Checkpoint.objects.get(job=job, step=2), user=engineer)
    _check_export(export, tmp_path, Path(job.base_model.path), celery_worker_proc)

    # Resume: the lost run's second attempt continues right after its last checkpoint; cancel stops it.
    job_resume(job=job, user=engineer)
    job = _run_until(job, lambda j: MetricPoint.objects.filter(job=j, attempt=2, name="actor/grad_norm").exists(),
                     "the resumed attempt's first step", celery_worker_proc)
    steps = sorted(MetricPoint.objects.filter(job=job, attempt=2, name="actor/grad_norm")
                   .values_list("step", flat=True))
    # The trainer may save again between the supervisor's death and the sync giving it up: the resume
    # starts from the last checkpoint it left, and continues right after it.
    resumed_from = int(job.attempts.get(number=2).resume_from.rsplit("global_step_", 1)[1].strip("/"))
    assert resumed_from >= 2 and resumed_from % HP["save_freq"] == 0
    assert steps[0] == resumed_from + 1
    assert f"global_step_{resumed_from}" in (run_dir / "attempts" / "2" / "log.txt").read_text()
    # the resumed step trains as a first one does: a gradient, the rollout in step with the weights, the KL term
    resumed = dict(MetricPoint.objects.filter(job=job, attempt=2, step=steps[0], name__in=(
        "actor/grad_norm", "training/rollout_probs_diff_max", "actor/kl_loss")).values_list("name", "value"))
    assert resumed["actor/grad_norm"] > 0 and resumed["training/rollout_probs_diff_max"] < 1e-2
    assert "actor/kl_loss" in resumed, resumed

    job_cancel(job=job, user=engineer)
    job = _run_until(job, lambda j: j.state == JobState.CANCELLED, "the cancel", celery_worker_proc, timeout=300)
    deadline = time.time() + 120
    while _ray_processes(run_dir) and time.time() < deadline:
        time.sleep(0.5)
    assert not _ray_processes(run_dir)
    assert not any(Path(d).exists() for d in _scratch(run_dir, 2))
    pid = int((run_dir / "attempts" / "2" / "supervisor.pid").read_text())
    deadline = time.time() + 120  # exit.json is its last write: it may still be exiting
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.5)
    assert not _alive(pid)


def _check_steps(job: Job, run_dir: Path, steps: list[int]) -> None:
    """What each of these steps logged: a gradient, the rollout server in step with the trainer's weights (synced
    after every update), the KL guard's metric, and the rollout dumps behind the reward curve."""
    grad = _metrics(job, "actor/grad_norm")
    assert set(steps) <= set(grad) and all(grad[s] > 0 for s in steps), grad
    diff = _metrics(job, "training/rollout_probs_diff_max")
    assert all(diff[s] < 1e-2 for s in steps), diff
    assert set(steps) <= set(_metrics(job, "actor/kl_loss"))
    _check_rollout_store(job, run_dir, steps)


def _check_ended_clean(run_dir: Path, attempt: int) -> None:
    assert not _ray_processes(run_dir) and not any(Path(d).exists() for d in _scratch(run_dir, attempt))


def _scratch(run_dir: Path, attempt: int) -> list[str]:
    import json

    launch = json.loads((run_dir / "attempts" / str(attempt) / "launch.json").read_text())
    return launch.get("scratch_dirs") or []


def _listeners(supervisor_pid: int) -> list[tuple[str, str, int]]:
    """(process, address, port) of every listening socket in the attempt's process tree."""
    import psutil

    found = []
    root = psutil.Process(supervisor_pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            found += [(proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            continue  # a process that ended while the tree was read
    return found


def _ray_worker_niceness(supervisor_pid: int) -> dict[str, int]:
    """{process name: nice value} of the Ray worker processes (named ray::...) in the attempt's process tree."""
    import psutil

    found = {}
    for proc in psutil.Process(supervisor_pid).children(recursive=True):
        try:
            if proc.name().startswith("ray::"):
                found[f"{proc.name()}[{proc.pid}]"] = proc.nice()
        except psutil.Error:
            continue  # a process that ended while the tree was read
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (the supervisor is re-parented to init)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
