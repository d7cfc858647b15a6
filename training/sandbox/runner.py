"""RewardSandbox: scores batches with untrusted reward code in one reusable sandboxed child process.

The child (see `_child.py`) loads the user's module once, then scores whole batches and streams the
results back in chunks, so a batch costs a few pipe messages rather than a process per sample.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from training.sandbox import isolation
from training.sandbox.process import ChildDied, SandboxProcess, dumps
from training.sandbox.protocol import KeyCheck, columns, decode_chunk, fail, pieces
from training.sandbox.types import RewardLoadError, SandboxLimits, ScoreResult

_CPU_HARD_BATCHES = 50  # RLIMIT_CPU hard limit = load + this many batch budgets; then a fresh process


class RewardSandbox:
    """Run `compute_score` from untrusted `source` in a sandboxed, reusable child process.

    Use as a context manager; `score_batch` / `iter_scores` never raise for what the user code does
    (every failure is a ScoreResult with `error`), only RewardLoadError when the source cannot be
    loaded at all (raised by `__enter__`/`start`, or when a restarted sandbox cannot load it again).
    """

    def __init__(self, source: str, name: str = "compute_score", limits: SandboxLimits | None = None,
                 hidden_paths: Iterable[str | os.PathLike[str]] = (), *, filename: str = "reward.py",
                 reward_kwargs: Mapping[str, Any] | None = None, isolation: str = "auto") -> None:
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, not {type(source).__name__}")
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not a valid function name")
        self.source, self.name, self.filename = source, name, filename
        self.limits = limits if limits is not None else SandboxLimits()
        self.hidden_paths = [os.fspath(p) for p in hidden_paths]
        self.reward_kwargs = dict(reward_kwargs or {})
        self.isolation = isolation
        self._private_dir: str | None = None
        self._launch: isolation.Launch | None = None
        self._child: SandboxProcess | None = None
        self._lock = threading.Lock()

    # ---- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> RewardSandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten sandbox must not outlive its owner
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    @property
    def mode(self) -> str:
        """"bubblewrap" or "rlimits": how this sandbox's process is isolated."""
        return self._plan().mode

    @property
    def cpu_seconds(self) -> float:
        """CPU time used so far by the current sandbox process (as of the end of the last batch)."""
        return self._child.cpu_used if self._child is not None else 0.0

    def _plan(self) -> isolation.Launch:
        if self._launch is None:
            launch = isolation.plan(self.limits, self.hidden_paths, self.isolation)
            if launch.mode == "rlimits":  # no private tmpfs there: a private HOME/TMPDIR/cwd instead
                self._private_dir = tempfile.mkdtemp(prefix="reward-sandbox-")
                launch = isolation.plan(self.limits, self.hidden_paths, "rlimits", self._private_dir)
            self._launch = launch
        return self._launch

    def start(self) -> None:
        """Start the sandbox process and load the reward; raise RewardLoadError if it cannot load."""
        with self._lock:
            self._ensure_child()

    def close(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.dispose()
        if self._private_dir:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None
            self._launch = None  # a restart after close() makes a new private dir

    def _ensure_child(self) -> SandboxProcess:
        child = self._child
        cpu_hard = self.limits.load_time_limit_s + _CPU_HARD_BATCHES * self.limits.batch_time_limit_s
        if child is not None and child.alive() and child.cpu_used + self.limits.batch_time_limit_s < cpu_hard - 1:
            return child
        if child is not None:  # dead, or near its lifetime CPU budget: a fresh one
            child.dispose()
            self._child = None
        cfg = {"source": self.source, "name": self.name, "filename": self.filename,
               "limits": self.limits.to_dict(), "cpu_hard_s": int(cpu_hard) + 1}
        self._child = SandboxProcess(self._plan(), cfg, self.limits.load_time_limit_s)
        return self._child

    # ---- scoring -----------------------------------------------------------------------------------
    def score_batch(self, items: Iterable[Mapping[str, Any]]) -> list[ScoreResult]:
        """Score every item; one ScoreResult per item, in order (failures carry `error`)."""
        cols = columns(items)
        out: list[ScoreResult] = []
        with self._lock:
            for chunk in self._run(cols):
                out.extend(chunk)
        return out

    def iter_scores(self, items: Iterable[Mapping[str, Any]]) -> Iterator[ScoreResult]:
        """Yield one ScoreResult per item, in order, as they are computed."""
        cols = columns(items)
        with self._lock:
            for chunk in self._run(cols):
                yield from chunk

    def _run(self, cols: dict[str, Any]) -> Iterator[list[ScoreResult]]:
        """Yield the batch's results in order, in chunks; restart the child after a crash or a hang."""
        n, nxt, restarts = len(cols["sol"]), 0, 0
        lim = self.limits
        batch_deadline = time.monotonic() + lim.batch_time_limit_s
        failed_at: dict[int, ScoreResult] = {}  # samples that crashed or hung a sandbox: not run again
        keys = KeyCheck()
        try:
            while nxt < n:
                if nxt in failed_at:
                    yield [failed_at.pop(nxt)]
                    nxt += 1
                    continue
                stop = min([k for k in failed_at if k > nxt] or [n])
                try:
                    child = self._ensure_child()
                except RewardLoadError as exc:
                    yield fail(nxt, n, f"the sandbox was restarted and could not load the reward: {exc}")
                    nxt = n
                    return
                seq0, base = child.next_seq, nxt  # the memfd shows seq0 + (index - base) while `index` runs
                child.next_seq += stop - nxt + 1
                try:
                    for chunk in self._stream(child, cols, base, stop, seq0, keys, batch_deadline):
                        nxt += len(chunk)
                        yield chunk
                except ChildDied as died:
                    running = died.running if died.running is not None else child.running(seq0, base, stop)
                    child.dispose()
                    self._child = None
                    restarts += 1
                    if died.fatal_for_batch and died.timed_out:  # the batch's wall-clock time is up
                        yield fail(nxt, n, died.reason)
                        nxt = n
                        return
                    if died.fatal_for_batch:  # its CPU budget is spent: what finished before is scored again
                        first = running if running is not None and nxt <= running < stop else nxt
                        failed_at.update((i, ScoreResult(i, None, {}, died.reason)) for i in range(first, n))
                    elif running is not None or nxt != base or died.timed_out:
                        # the sample it was on is to blame; the results it had not sent are scored again
                        culprit = running if running is not None and nxt <= running < stop else nxt
                        tail = child.stderr_text().strip()
                        failed_at[culprit] = ScoreResult(culprit, None, {}, died.reason,
                                                         f"sandbox stderr (last lines):\n{tail}" if tail else None)
                    # else it died before it started this batch (killed while idle, say): nobody to blame
                    if restarts > lim.max_restarts:
                        gave_up = f"not scored: the sandbox failed {restarts} times in this batch (last: {died.reason})"
                        yield [failed_at.pop(i) if i in failed_at else ScoreResult(i, None, {}, gave_up)
                               for i in range(nxt, n)]
                        nxt = n
                        return
        finally:
            if nxt < n and self._child is not None:
                self._child.dispose()  # the caller stopped early (or we failed): the child is mid-batch
                self._child = None

    def _stream(self, child: SandboxProcess, cols: dict[str, Any], start: int, stop: int, seq0: int,
                keys: KeyCheck, batch_deadline: float) -> Iterator[list[ScoreResult]]:
        """Score items start..stop-1 in `child`, yielding result chunks; raise ChildDied if it fails."""
        lim = self.limits
        # a call may run for time_limit_s before the child's watchdog stops it: allow for that and more
        stall_s = lim.time_limit_s + max(1.0, 0.25 * lim.time_limit_s)
        parts = pieces(start, stop)  # the child starts on the first piece while we encode the rest
        pos = 0
        for k, (a, b) in enumerate(parts):
            ex = cols["ex"][a:b] if cols["ex"] is not None else None
            payload = dumps({"offset": a, "seq0": seq0 + a - start, "ds": cols["ds"][a:b], "sol": cols["sol"][a:b],
                             "gt": cols["gt"][a:b], "ex": ex, "kwargs": self.reward_kwargs})
            child.send_piece(payload, pos, k == 0, k == len(parts) - 1, batch_deadline)
            pos += len(payload)
        nxt, ends = start, 0
        while ends < len(parts):
            try:
                msg = child.read_message(min(time.monotonic() + stall_s, batch_deadline))
            except TimeoutError:
                running = child.running(seq0, start, stop)
                child.kill()
                if time.monotonic() >= batch_deadline:
                    raise ChildDied(f"the batch took longer than {lim.batch_time_limit_s:g} s (batch_time_limit_s)",
                                    running, fatal_for_batch=True, timed_out=True) from None
                raise ChildDied(f"timed out after {lim.time_limit_s:g} s (time_limit_s) and did not stop; "
                                "the sandbox was restarted", running, timed_out=True) from None
            chunk = decode_chunk(msg, nxt, stop, keys, lim.time_limit_s * 1000.0)
            if chunk is None:
                running = child.running(seq0, start, stop)
                child.kill()
                raise ChildDied("the sandbox sent a malformed result", running)
            nxt += len(chunk)
            if chunk:
                yield chunk
            if msg.get("end"):
                if nxt != parts[ends][1]:  # the child skipped items: never trust it again
                    child.kill()
                    raise ChildDied("the sandbox ended a batch early", None)
                ends += 1
                child.cpu_used = float(msg.get("cpu") or 0.0)
