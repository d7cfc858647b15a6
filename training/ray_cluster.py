"""A VERL job on an existing Ray cluster: the shared-storage check before a launch, and Ray's word on a job.

The launch plan runs `ray job submit` (training.backends.verl); the driver then runs on the cluster
and reads and writes the run directory there, so that directory must be on storage every node
mounts at the same path. `check_shared_storage` proves it before the trainer starts: a short Ray
job runs one task on every alive node, each reads a token the worker wrote and writes its answer
next to it, and the worker reads the answers back.

`lost_reason` reads Ray's job status after `ray job submit` returned: a job that Ray reports dead
for a reason other than the trainer's own exit code (its node or its supervisor actor died, it
was stopped by someone else, the cluster forgot it) is lost, and resumes from its last checkpoint.

Ray is imported lazily: the web app imports this module without it.
"""
from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from training.backends.base import BackendError

PROBE_DIR = ".ray-storage-probe"
# Ray's error type for a driver that exited non-zero: the training failed, the cluster did not lose it.
TRAINING_ERROR = "JOB_ENTRYPOINT_COMMAND_ERROR"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")

_PROBE = r'''
import json, os, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

folder, token = sys.argv[1], sys.argv[2]
ray.init()

@ray.remote(num_cpus=0)
def answer(node_id):
    try:
        with open(os.path.join(folder, "token")) as fh:
            seen = fh.read()
    except OSError as exc:
        return f"cannot read it: {exc}"
    if seen != token:
        return "reads another folder at that path"
    try:
        with open(os.path.join(folder, node_id), "w") as fh:
            fh.write(token)
    except OSError as exc:
        return f"cannot write to it: {exc}"
    return "ok"

nodes = [(n["NodeID"], n["NodeManagerAddress"]) for n in ray.nodes() if n["Alive"]]
refs = [answer.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote(n)
        for n, _ in nodes]
report = [{"node": n, "ip": ip, "answer": a} for (n, ip), a in zip(nodes, ray.get(refs))]
print(json.dumps(report))
'''


class ClusterError(BackendError):
    """The cluster cannot take the job: unreachable (may clear), or the run directory is not shared."""


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address)


def check_shared_storage(address: str, run_dir: Path, timeout_s: float = 600.0) -> int:
    """Prove that every alive node of the cluster reads and writes `run_dir`; returns the node count.

    Raises ClusterError with what each failing node answered. The wait ends on the probe job's end
    (its status), `timeout_s` is only a bound for a cluster that never schedules it.
    """
    run_dir = Path(run_dir).resolve()
    folder = run_dir / PROBE_DIR / secrets.token_hex(6)
    token = secrets.token_hex(16)
    folder.mkdir(parents=True)
    (folder / "token").write_text(token)
    try:
        try:
            client = _client(address)
            sub_id = client.submit_job(entrypoint=f"python3 -c {_shell_quote(_PROBE)} {folder} {token}")
        except Exception as exc:  # noqa: BLE001 - any failure to reach the cluster is the same answer
            raise ClusterError(f"cannot reach the Ray cluster at {address}: {exc}", permanent=False) from None
        status = _wait(client, sub_id, timeout_s)
        logs = _logs(client, sub_id)
        if status != "SUCCEEDED":
            raise ClusterError(f"the storage check on the Ray cluster at {address} ended {status}: "
                               f"{logs[-1500:]}", permanent=False)
        report = _report(logs)
        bad = [r for r in report if r["answer"] != "ok" or _answer(folder, r["node"]) != token]
        if not report or bad:
            detail = "; ".join(f"node {r['ip']} ({r['node'][:8]}) "
                               + (r["answer"] if r["answer"] != "ok" else "wrote an answer this worker cannot see")
                               for r in bad) or "no node answered"
            raise ClusterError(
                f"the Ray cluster at {address} cannot use the run directory {run_dir}: {detail}. "
                "Put the runs folder on storage that every node mounts at the same path (NFS, a shared "
                "volume) and point the app's RUNS_ROOT at it.")
        return len(report)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # another launch's check may be using it
            folder.parent.rmdir()


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _wait(client, sub_id: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    status = "PENDING"
    while time.monotonic() < deadline:
        status = str(client.get_job_status(sub_id).value)
        if status in TERMINAL:
            return status
        time.sleep(0.5)
    client.stop_job(sub_id)
    return f"{status} after {timeout_s:.0f} s"


def _logs(client, sub_id: str) -> str:
    try:
        return client.get_job_logs(sub_id)
    except Exception:  # noqa: BLE001
        return ""


def _report(logs: str) -> list[dict[str, str]]:
    for line in reversed(logs.splitlines()):
        if line.startswith("[{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return []


def _answer(folder: Path, node_id: str) -> str | None:
    try:
        return (folder / node_id).read_text()
    except OSError:
        return None


def job_info(address: str, submission_id: str) -> dict[str, Any] | None:
    """Ray's status of a submitted job ({status, error_type, message}); None when the cluster cannot say."""
    try:
        info = _client(address).get_job_info(submission_id)
    except Exception:  # noqa: BLE001 - unreachable, or the job is unknown to this cluster
        return None
    return {"status": str(info.status.value), "error_type": getattr(info, "error_type", None) or "",
            "message": (info.message or "")[:1000]}


def lost_reason(info: dict[str, Any] | None, stopped_by_us: bool) -> str | None:
    """Why the job counts as lost from Ray's word on it; None when it succeeded, failed on its own or we stopped it."""
    if info is None:
        return "the Ray cluster has no record of the job (it restarted, or cannot be reached)"
    status, kind = info.get("status"), info.get("error_type") or ""
    if status == "SUCCEEDED" or (status == "STOPPED" and stopped_by_us):
        return None
    if status == "FAILED" and kind == TRAINING_ERROR:
        return None
    if status == "STOPPED":
        return f"the job was stopped on the Ray cluster: {info.get('message') or 'by someone else'}"
    if status == "FAILED":
        return f"Ray reports the job dead ({kind or 'no error type'}): {info.get('message')}"
    return f"`ray job submit` ended while Ray still reports the job {status}"
