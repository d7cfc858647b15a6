"""A real Ray cluster on this machine for tests and benchmarks: a head and more nodes, loopback only.

Each node is a `ray start` with its own temp dir and ports picked free on 127.0.0.1; the cluster has
its own token (`RAY_AUTH_MODE=token`), which the processes it starts inherit: `stop()` finds them by
that token, their temp dir and their parentage and kills them, so it never touches another Ray on the
machine (`ray stop` would stop them all). Each node offers one "GPU" (the CPU platform's resource,
training/verl_cpu/platform.py), so a VERL CPU job puts one data-parallel worker on each node.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from training.verl_cpu.ray_startup import RAY_STARTUP_ENV, free_loopback_ports

START_TIMEOUT_S = 600  # a bound for a machine under heavy load; `ray start` returns once the node is up
# `ray start`, keeping 127.0.0.1 as the node's IP: Ray replaces a loopback --node-ip-address with the
# machine's outward address (services.resolve_ip_for_localhost), and then listens there. Its node
# waits for the raylet's registration as the CPU plugin's driver does (Ray's own wait is 30 s), and its
# raylet is told the agent's listen port (else it waits a fixed 15 s for the agent to report it).
RAY_START = """import sys
import ray._private.ray_constants as ray_constants
import ray._private.services as services
services.resolve_ip_for_localhost = lambda host: host
ray_constants.ENABLE_RAY_CLUSTER = True  # the env below says 0 for every other process; `ray start` may join
from training.verl_cpu.ray_startup import agent_ports_up_front, patient_node_lookup
patient_node_lookup()
agent_ports_up_front()
from ray.scripts.scripts import main
sys.argv[0] = "ray"
main()
"""
COUNT_ALIVE = """import sys
from ray.util.state import list_nodes
print(sum(node.state == "ALIVE" for node in list_nodes(address=sys.argv[1])))
"""
# Ray's record of one submitted job: its status, its actors (dead ones included: Ray keeps them) and the alive nodes.
JOB_REPORT = """import json, sys
from ray.job_submission import JobSubmissionClient
from ray.util.state import list_actors, list_nodes
address, sub_id = sys.argv[1], sys.argv[2]
job = {j.submission_id: j for j in JobSubmissionClient(address).list_jobs()}.get(sub_id)
actors = []
if job is not None and job.job_id:
    actors = [{"class": a.class_name, "state": a.state, "node": a.node_id, "pid": a.pid}
              for a in list_actors(address=address, filters=[("job_id", "=", job.job_id)], limit=10000, detail=True)]
print(json.dumps({"status": job.status.value if job else None, "job_id": job.job_id if job else None,
                  "driver_node": job.driver_node_id if job else None, "actors": actors,
                  "nodes": sorted(n.node_id for n in list_nodes(address=address) if n.state == "ALIVE")}))
"""


class LoopbackRayCluster:
    def __init__(self, nodes: int = 2, cpus_per_node: int = 4) -> None:
        self.nodes, self.cpus = nodes, cpus_per_node
        self.base = Path(tempfile.mkdtemp(prefix="rlhf-rc-", dir="/tmp"))  # Ray's socket paths must stay short
        self.token = secrets.token_hex(16)
        # every port the cluster is told, chosen together so no two components are handed the same one
        self._ports = iter(free_loopback_ports(3 + 4 * nodes))
        self.gcs_port, self.dashboard_port = next(self._ports), next(self._ports)
        bin_dir = str(Path(sys.executable).parent)
        self.env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0",
                    # every process the cluster starts (agents, job drivers, workers) keeps 127.0.0.1 rather
                    # than the machine's outward address, where nothing of this cluster listens
                    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                    **RAY_STARTUP_ENV, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        self.env.pop("RAY_ADDRESS", None)
        self.ray_start = [sys.executable, "-c", RAY_START, "start"]

    @property
    def address(self) -> str:
        """What a worker's RAY_ADDRESS names: the job-submission (dashboard) server."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def client_env(self) -> dict[str, str]:
        """The environment a client of this cluster needs (the app's worker, `ray job ...`)."""
        return {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
                "PATH": self.env["PATH"]}

    def _node_args(self, index: int) -> list[str]:
        temp = self.base / f"n{index}"
        temp.mkdir()
        agent_listen, agent_grpc, metrics_export, runtime_env = (next(self._ports) for _ in range(4))
        return ["--node-ip-address=127.0.0.1", f"--num-cpus={self.cpus}", "--num-gpus=1", f"--temp-dir={temp}",
                f"--dashboard-agent-listen-port={agent_listen}", f"--dashboard-agent-grpc-port={agent_grpc}",
                f"--metrics-export-port={metrics_export}", f"--runtime-env-agent-port={runtime_env}",
                "--disable-usage-stats"]

    def start(self) -> LoopbackRayCluster:
        head = [*self.ray_start, "--head", f"--port={self.gcs_port}", "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}", "--include-dashboard=true",
                f"--ray-client-server-port={next(self._ports)}", *self._node_args(0)]
        try:
            self._run(head)
            for index in range(1, self.nodes):
                self._run([*self.ray_start, f"--address=127.0.0.1:{self.gcs_port}", *self._node_args(index)])
            self._wait_for_nodes()
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, argv: list[str]) -> None:
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=START_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} failed: {out.stdout[-2000:]}\n{out.stderr[-3000:]}")

    def _wait_for_nodes(self) -> None:
        """Until the cluster shows all its nodes alive. Asked from a fresh process with the cluster's token: Ray
        reads its authentication settings once per process, and this one may have imported Ray without them."""
        deadline = time.monotonic() + START_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            out = subprocess.run([sys.executable, "-c", COUNT_ALIVE, self.address], env=self.env, capture_output=True,
                                 text=True, timeout=START_TIMEOUT_S, stdin=subprocess.DEVNULL)
            last = (out.stdout.strip() or out.stderr.strip()[-500:])
            if out.returncode == 0 and out.stdout.strip().isdigit() and int(out.stdout) >= self.nodes:
                return
            time.sleep(1)
        raise RuntimeError(f"the Ray cluster at {self.address} did not show {self.nodes} nodes: {last}")

    def job_report(self, submission_id: str) -> dict:
        """What Ray records of a submitted job (JOB_REPORT), asked from a fresh process with the cluster's token."""
        out = subprocess.run([sys.executable, "-c", JOB_REPORT, self.address, submission_id], env=self.env,
                             capture_output=True, text=True, timeout=START_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"cannot read job {submission_id} from {self.address}: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def processes_with(self, text: str) -> list[int]:
        """The cluster's live processes whose environment or command line holds `text` (a job's run dir)."""
        found = []
        for pid in self.processes():
            try:
                blob = Path(f"/proc/{pid}/environ").read_bytes() + Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in blob:
                found.append(pid)
        return found

    def listening(self) -> list[tuple[int, str, str, int]]:
        """(pid, name, ip, port) of every listening socket of the cluster's processes."""
        import psutil

        found = []
        for pid in self.processes():
            try:
                proc = psutil.Process(pid)
                found += [(pid, proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                          if c.status == psutil.CONN_LISTEN]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def processes(self) -> list[int]:
        """Live processes started by this cluster: those carrying its token in their environment or naming its
        temp dir, and their descendants (Ray starts some agents with an environment of its own)."""
        import psutil

        marker, base = f"RAY_AUTH_TOKEN={self.token}".encode(), str(self.base).encode()
        found: set[int] = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    environ = fh.read().split(b"\0")
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker in environ or base in cmdline:
                found.add(int(entry))
        for pid in list(found):
            with contextlib.suppress(psutil.Error):
                found.update(child.pid for child in psutil.Process(pid).children(recursive=True))
        return sorted(pid for pid in found if _live(pid))

    def stop(self, wait_s: float = 60.0) -> list[int]:
        """Kill every process of the cluster and remove its folders; returns what was still alive after."""
        deadline = time.monotonic() + wait_s
        left = self.processes()
        while left and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            left = self.processes()
        shutil.rmtree(self.base, ignore_errors=True)
        return left


def _live(pid: int) -> bool:
    """Running: not gone, not a zombie waiting for its reaper."""
    import psutil

    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False
