"""A VERL CPU job through the app on a real two-node Ray cluster: `ray start` makes a head and a second
node on 127.0.0.1 (tests/ray_cluster_support.py), a real Celery worker whose RAY_ADDRESS names the
cluster launches the job with nnodes=2 (one data-parallel worker per node, gloo) by `ray job submit`.

What Ray records is read back from Ray itself (its job list, the job's actors and their nodes): the
job ran workers on both nodes; its metrics and checkpoint reach the app; a rollback child resumes
from that checkpoint on the cluster; cancel through the app leaves no job, actor or process of the run
there. One cluster serves every phase (starting one takes a minute on two busy cores); it is stopped
when the module ends, failed or not."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("verl")

from tests.ray_cluster_support import LoopbackRayCluster  # noqa: E402
from tests.webapp.runs.test_verl_cpu_run import _metrics, _run_until, demo_model, inputs  # noqa: E402,F401
from webapp.runs.models import Checkpoint, JobState, MetricPoint  # noqa: E402

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
RAY_WAIT_S = 300  # a guard against a hang: how long Ray may take to record a job's end on a busy machine
# Small batches (two prompts on each node's worker) and an early checkpoint keep the run short.
HP = {"batch_size": 4, "group_size": 2, "max_steps": 2, "save_freq": 2, "test_freq": 0, "lr": 1e-3,
      "kl_coef": 0.02, "verl.nnodes": 2}
# Logical CPU slots, not cores: a node's trainer worker takes 3 with its "GPU", and V1's TaskRunner and
# TransferQueue actors land beside one of them (4 slots leave V1's second worker unplaced forever).
CPUS_PER_NODE = 8
TRAINER_WORKERS = "WorkerDict"  # VERL's actor class that holds a node's actor/ref/rollout workers


@pytest.fixture(scope="module")
def ray_cluster():
    cluster = LoopbackRayCluster(nodes=2, cpus_per_node=CPUS_PER_NODE).start()
    try:
        yield cluster
    finally:
        left = cluster.stop()
        assert not left, f"Ray processes still alive after the cluster's stop: {left}"


@pytest.fixture
def cluster_worker(ray_cluster, transactional_db, tmp_path, settings):
    """Real Celery workers (as celery_worker_proc) that send VERL jobs to the cluster: RAY_ADDRESS and its token."""
    from tests.conftest import start_celery_workers, stop_celery_workers

    procs = start_celery_workers(settings, tmp_path / "worker.log", extra_env=ray_cluster.client_env)
    yield procs[0]
    stop_celery_workers(procs)


def _submission(run_dir: Path) -> str:
    launch = json.loads((run_dir / "attempts" / "1" / "launch.json").read_text())
    assert launch["ray_job"]["address"].startswith("http://127.0.0.1:")
    return launch["ray_job"]["submission_id"]


def _ray_until(cluster: LoopbackRayCluster, sub_id: str, done, what: str) -> dict:
    deadline = time.monotonic() + RAY_WAIT_S
    report = cluster.job_report(sub_id)
    while not done(report) and time.monotonic() < deadline:
        time.sleep(1)
        report = cluster.job_report(sub_id)
    assert done(report), f"{what}: Ray reports {report}"
    return report


def _trainer_nodes(report: dict) -> set[str]:
    return {a["node"] for a in report["actors"] if a["class"].endswith(TRAINER_WORKERS)}


def test_a_two_node_job_trains_on_the_cluster_a_rollback_child_resumes_there_and_cancel_clears_it(
        project, engineer, inputs, ray_cluster, cluster_worker, stop_runs):  # noqa: F811 - the imported fixture
    from webapp.runs.services import job_cancel, job_create, job_create_child

    job = job_create(project=project, user=engineer, kind="grpo", backend="verl", preset="demo-cpu",
                     hp_overrides=HP, include_unreviewed=True, **inputs)
    assert job.config["verl"]["nnodes"] == 2
    use_v1 = job.config["verl"]["use_v1"]  # the form's default trainer, whichever it is
    job = _run_until(job, lambda j: j.state == JobState.SUCCEEDED, "the two-node job", cluster_worker)
    run_dir = Path(job.run_dir)
    sub_id = _submission(run_dir)
    report = _ray_until(ray_cluster, sub_id, lambda r: r["status"] == "SUCCEEDED", "the job's end")
    assert len(report["nodes"]) == 2
    # One data-parallel worker on each node (each offers one "GPU"): VERL's worker actors ran on both.
    assert _trainer_nodes(report) == set(report["nodes"]), report["actors"]
    assert all(a["state"] == "DEAD" for a in report["actors"])
    launch = (run_dir / "attempts" / "1" / "launch.json").read_text()
    assert "trainer.nnodes=2" in launch and f"trainer.use_v1={use_v1}" in launch
    grad = _metrics(job, "actor/grad_norm")
    assert sorted(grad) == [1, 2] and all(v > 0 for v in grad.values())
    assert list(job.checkpoints.values_list("step", flat=True)) == [2]
    assert (run_dir / "checkpoints" / "global_step_2" / "actor").is_dir()

    # The rollback child resumes from step 2 on the cluster, and runs (saving nothing more) until it is cancelled.
    ckpt = Checkpoint.objects.get(job=job, step=2)
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    child = job_create_child(parent=job, checkpoint=ckpt, user=engineer, hp_overrides={"max_steps": 500,
                                                                                        "save_freq": 0})
    child = _run_until(child, lambda j: MetricPoint.objects.filter(job=j, name="actor/grad_norm").exists(),
                       "the rollback child's first step", cluster_worker)
    child_dir = Path(child.run_dir)
    child_sub = _submission(child_dir)
    assert child_sub != sub_id and child_dir != run_dir
    assert min(_metrics(child, "actor/grad_norm")) == 3  # continues right after the checkpoint
    log = (child_dir / "attempts" / "1" / "log.txt").read_text()
    assert f"Resuming from {ckpt.path}" in log or f"Load from checkpoint folder: {ckpt.path}" in log
    assert ("TaskRunnerV1" in log) is use_v1  # the child runs the parent's trainer
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == kept  # the parent is left as it was
    running = ray_cluster.job_report(child_sub)
    assert running["status"] == "RUNNING", running
    live = [a for a in running["actors"] if a["state"] == "ALIVE"]
    assert {a["node"] for a in live if a["class"].endswith(TRAINER_WORKERS)} == set(running["nodes"]), live
    pids = {a["pid"] for a in live if a["pid"]}
    # The check below finds the run's processes on the cluster by its run dir (their environment names it).
    assert pids and pids <= set(ray_cluster.processes_with(str(child_dir))), live
    # Ray's default nice 15 for workers starves a CPU job beside any busy process: they keep the starter's priority.
    assert {psutil.Process(pid).nice() for pid in pids} == {os.getpriority(os.PRIO_PROCESS, 0)}, live

    job_cancel(job=child, user=engineer)
    child = _run_until(child, lambda j: j.state == JobState.CANCELLED, "the cancel", cluster_worker)
    stopped = _ray_until(ray_cluster, child_sub, lambda r: r["status"] == "STOPPED"
                         and all(a["state"] == "DEAD" for a in r["actors"]), "the cancelled job's stop")
    deadline = time.monotonic() + RAY_WAIT_S
    while (ray_cluster.processes_with(str(child_dir)) or _alive(pids)) and time.monotonic() < deadline:
        time.sleep(1)
    assert not ray_cluster.processes_with(str(child_dir)), "processes of the cancelled run are left on the cluster"
    assert not _alive(pids), f"worker processes of the cancelled run are left: {_alive(pids)}"
    assert len(stopped["nodes"]) == 2  # the cluster itself lives on


def _alive(pids: set[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            left.append(pid)
    return left
