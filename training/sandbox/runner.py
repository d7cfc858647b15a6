"""RewardSandbox: scores batches with untrusted reward code in one reusable sandboxed child process.

The child (see `_child.py`) loads the user's module once, then scores whole batches and streams the
results back in chunks, so a batch costs a few pipe messages rather than a process per sample.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from training.sandbox import isolation
from training.sandbox.process import ChildDied, SandboxProcess, dumps
from training.sandbox.protocol import KeyCheck, LogBudget, columns, decode_chunk, fail_results, failed, pieces
from training.sandbox.types import Chunk, RewardLoadError, SandboxLimits, ScoreBatch, ScoreResult

_CPU_HARD_BATCHES = 50  # RLIMIT_CPU hard limit = load + this many batch budgets; then a fresh process


class RewardSandbox:
    """Run `compute_score` from untrusted `source` in a sandboxed, reusable child process.

    Use as a context manager; `score_batch` / `iter_scores` never raise for what the user code does
    (every failure is a ScoreResult with `error`), only RewardLoadError when the source cannot be
    loaded at all (raised by `__enter__`/`start`, or when a restarted sandbox cannot load it again).
    """

    def __init__(self, source: str, name: str = "compute_score", limits: SandboxLimits | None = None,
                 hidden_paths: Iterable[str | os.PathLike[str]] = (), *, filename: str = "reward.py",
                 reward_kwargs: Mapping[str, Any] | None = None, isolation: str = "auto",
                 exact_timing: bool = False) -> None:
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, not {type(source).__name__}")
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not a valid function name")
        self.source, self.name, self.filename = source, name, filename
        self.limits = limits if limits is not None else SandboxLimits()
        self.hidden_paths = [os.fspath(p) for p in hidden_paths]
        self.reward_kwargs = dict(reward_kwargs or {})
        self.isolation = isolation
        # True: the calls are asked for one at a time and each is timed on this side's clock (test-runs,
        # where an outlier's time matters, and the reward, which shares the child process, could lie).
        # False: calls faster than 20 us run in groups through map() and share the group's time (training).
        self.exact_timing = exact_timing
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
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()

    @property
    def mode(self) -> str:
        """"bubblewrap" or "rlimits": how this sandbox's process is isolated."""
        return self._plan().mode

    @property
    def load_log(self) -> str:
        """What the reward printed while its module loaded (the current sandbox process)."""
        return self._child.load_log if self._child is not None else ""

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
    def score_batch(self, items: Iterable[Mapping[str, Any]], *, check_keys: bool = True,
                    deadline: float | None = None) -> ScoreBatch:
        """Score every item; one ScoreResult per item, in order (failures carry `error`).

        The ScoreBatch keeps the results as columns: `.scores` is the list of floats (None where a
        sample failed) without building an object per sample. `check_keys=False` leaves the "every
        sample returns the same keys" check to the caller (a pool checks the whole batch at once);
        `deadline` (time.monotonic()) ends the batch sooner than batch_time_limit_s would (a pool's shard)."""
        items = items if isinstance(items, list) else list(items)
        out = ScoreBatch()
        with self._lock:
            for chunk in self._run(items, check_keys, deadline):
                out.add(chunk)
        out.cap_logs(LogBudget(self.limits.max_batch_log_chars))
        return out

    def iter_scores(self, items: Iterable[Mapping[str, Any]], *,
                    deadline: float | None = None) -> Iterator[ScoreResult]:
        """Yield one ScoreResult per item, in order, as they are computed (`deadline`: as in score_batch)."""
        items = items if isinstance(items, list) else list(items)
        out = ScoreBatch()
        budget = LogBudget(self.limits.max_batch_log_chars)
        with self._lock:
            for chunk in self._run(items, deadline=deadline):
                start = len(out)
                out.add(chunk)
                for i in range(start, len(out)):
                    yield budget.take(out[i])

    def _run(self, items: list[Mapping[str, Any]], check_keys: bool = True,
             deadline: float | None = None) -> Iterator[Chunk]:
        """Yield the batch's results in order, in chunks; restart the child after a crash or a hang."""
        n, nxt, restarts = len(items), 0, 0
        lim = self.limits
        batch_deadline = time.monotonic() + lim.batch_time_limit_s
        if deadline is not None:
            batch_deadline = min(batch_deadline, deadline)
        failed_at: dict[int, ScoreResult] = {}  # samples that crashed or hung a sandbox: not run again
        keys = KeyCheck(check_keys)
        one_by_one = self.exact_timing  # after a crash inside a group of calls: find the call that did it
        try:
            while nxt < n:
                if nxt in failed_at:
                    yield fail_results([failed_at.pop(nxt)])
                    nxt += 1
                    continue
                stop = min([k for k in failed_at if k > nxt] or [n])
                try:
                    child = self._ensure_child()
                except RewardLoadError as exc:
                    yield failed(nxt, n, f"the sandbox was restarted and could not load the reward: {exc}")
                    nxt = n
                    return
                seq0, base = child.next_seq, nxt  # the memfd shows seq0 + (index - base) while `index` runs
                child.next_seq += stop - nxt + 1
                if self.exact_timing:
                    stream = self._stream_strict(child, items, base, stop, seq0, keys, batch_deadline)
                else:
                    stream = self._stream(child, items, base, stop, seq0, keys, batch_deadline, one_by_one)
                try:
                    for chunk in stream:
                        nxt += len(chunk[0])
                        yield chunk
                except ChildDied as died:
                    span = died.running if died.running is not None else child.running(seq0, base, stop)
                    span = span if span is not None and span[0] >= nxt else None
                    child.dispose()
                    self._child = None
                    if died.fatal_for_batch and (died.timed_out or died.tampered):  # time is up, or no trust left
                        yield failed(nxt, n, died.reason)
                        nxt = n
                        return
                    started = span is not None or nxt != base or died.timed_out  # it was on this batch
                    if died.fatal_for_batch:  # its CPU budget is spent: what finished before is scored again
                        first = span[0] if span is not None else nxt
                        failed_at.update((i, ScoreResult(i, None, {}, died.reason)) for i in range(first, n))
                    elif started and not one_by_one and (span is None or span[1] - span[0] > 1):
                        # in a group of calls, or between them: scoring the rest one call at a time names
                        # the culprit (this restart is not counted: it happens once a batch)
                        one_by_one = True
                        continue
                    elif started:
                        # the sample it was on is to blame; the results it had not sent are scored again
                        culprit = span[0] if span is not None else nxt
                        tail = child.stderr_text().strip()
                        failed_at[culprit] = ScoreResult(culprit, None, {}, died.reason,
                                                         f"sandbox stderr (last lines):\n{tail}" if tail else None)
                    # else it died before it started this batch (killed while idle, say): nobody to blame
                    restarts += 1
                    if restarts > lim.max_restarts:
                        gave_up = f"not scored: the sandbox failed {restarts} times in this batch (last: {died.reason})"
                        yield fail_results([failed_at.pop(i) if i in failed_at else ScoreResult(i, None, {}, gave_up)
                                            for i in range(nxt, n)])
                        nxt = n
                        return
        finally:
            if nxt < n and self._child is not None:
                self._child.dispose()  # the caller stopped early (or we failed): the child is mid-batch
                self._child = None

    def _stream_strict(self, child: SandboxProcess, items: list[Mapping[str, Any]], start: int, stop: int,
                       seq0: int, keys: KeyCheck, batch_deadline: float) -> Iterator[Chunk]:
        """Score items start..stop-1 one request at a time, each timed on this side's clock (exact timing).

        The reward shares the child's process, so it can write to the result pipe or patch the harness:
        nothing the child says about time is used, and a reply is accepted only for the one sample
        asked for. A result is held back until the next reply (or the closing one, for an empty request
        at `stop`) shows that no second answer for it was on its way. Raise ChildDied if the child fails."""
        lim = self.limits
        stall_s = lim.time_limit_s + max(1.0, 0.25 * lim.time_limit_s)
        held: Chunk | None = None
        for i in range(start, stop + 1):
            try:
                cols = columns(items[i:i + 1], i)
            except TypeError:
                child.kill()
                raise
            payload = dumps({"offset": i, "seq0": seq0 + i - start, **cols, "kwargs": self.reward_kwargs,
                             "exact": True})
            running = (i, i + 1) if i < stop else None  # this side knows which sample the child is on
            died: ChildDied | None = None
            t0 = time.perf_counter()
            try:
                child.send_piece(payload, 0, i == start, True, batch_deadline)
                msg, seconds = self._reply(child, i, i + (i < stop), min(time.monotonic() + stall_s, batch_deadline),
                                           t0)
            except TimeoutError:
                child.kill()
                if time.monotonic() >= batch_deadline:
                    died = ChildDied(f"the batch took longer than {lim.batch_time_limit_s:g} s (batch_time_limit_s)",
                                     running, fatal_for_batch=True, timed_out=True)
                else:
                    died = ChildDied(f"timed out after {lim.time_limit_s:g} s (time_limit_s) and did not stop; "
                                     "the sandbox was restarted", running, timed_out=True)
            except ChildDied as exc:
                died = exc if exc.tampered else _tampered() if exc.garbled else \
                    ChildDied(exc.reason, running, exc.fatal_for_batch)
            if died is not None:
                if held is not None and not died.tampered:
                    yield held
                raise died
            msg["t"] = [[1, seconds]] if i < stop else []  # our clock, not the one the child reports
            chunk = decode_chunk(msg, i, i + 1, keys, lim.time_limit_s * 1000.0, _log_room(lim))
            if chunk is None:
                child.kill()
                raise _tampered()
            if held is not None:
                yield held
            held = chunk

    @staticmethod
    def _reply(child: SandboxProcess, lo: int, hi: int, deadline: float, t0: float) -> tuple[dict[str, Any], float]:
        """The child's answer to a request for samples lo..hi-1 (hi - lo is 0 or 1), and the seconds until its
        result arrived. A slow call's result comes before the message that ends the request; anything that
        does not fit that (another sample, a second result) is tampering: the child is killed."""
        found: dict[str, Any] = {"i0": lo, "s": []}
        seconds, at = time.perf_counter() - t0, lo
        while True:
            msg = child.read_message(deadline)
            scores = msg.get("s")
            if msg.get("i0") != at or not isinstance(scores, list) or at + len(scores) > hi:
                child.kill()
                raise _tampered()
            if scores:
                found, seconds, at = msg, time.perf_counter() - t0, at + len(scores)
            if msg.get("end") is True:
                break
        if at != hi:
            child.kill()
            raise _tampered()
        child.cpu_used = float(msg.get("cpu") or 0.0)
        return found, seconds

    def _stream(self, child: SandboxProcess, items: list[Mapping[str, Any]], start: int, stop: int, seq0: int,
                keys: KeyCheck, batch_deadline: float, exact: bool) -> Iterator[Chunk]:
        """Score items start..stop-1 in `child`, yielding result chunks; raise ChildDied if it fails.

        `exact`: one call at a time (each timed on its own, and a crash names its sample)."""
        lim = self.limits
        # a call may run for time_limit_s before the child's watchdog stops it: allow for that and more
        stall_s = lim.time_limit_s + max(1.0, 0.25 * lim.time_limit_s)
        parts = pieces(start, stop)  # the child starts on the first piece while we encode the rest
        pos = 0
        for k, (a, b) in enumerate(parts):
            try:
                cols = columns(items[a:b], a)
            except TypeError:
                child.kill()  # it has pieces of a batch we will not finish
                raise
            payload = dumps({"offset": a, "seq0": seq0 + a - start, **cols, "kwargs": self.reward_kwargs,
                             "exact": exact})
            child.send_piece(payload, pos, k == 0, k == len(parts) - 1, batch_deadline)
            pos += len(payload)
        nxt = start
        while True:
            try:
                msg = child.read_message(min(time.monotonic() + stall_s, batch_deadline))
            except TimeoutError:
                # the call the watchdog gave up on, if it is still unanswered; else the group it is in
                late = child.timed_out_call(seq0, start, stop)
                running = (late, late + 1) if late is not None and late >= nxt else child.running(seq0, start, stop)
                child.kill()
                if time.monotonic() >= batch_deadline:
                    raise ChildDied(f"the batch took longer than {lim.batch_time_limit_s:g} s (batch_time_limit_s)",
                                    running, fatal_for_batch=True, timed_out=True) from None
                raise ChildDied(f"timed out after {lim.time_limit_s:g} s (time_limit_s) and did not stop; "
                                "the sandbox was restarted", running, timed_out=True) from None
            chunk = decode_chunk(msg, nxt, stop, keys, lim.time_limit_s * 1000.0, _log_room(lim))
            if chunk is None:
                running = child.running(seq0, start, stop)
                child.kill()
                raise ChildDied("the sandbox sent a malformed result", running)
            nxt += len(chunk[0])
            if chunk[0]:
                yield chunk
            if msg.get("end"):
                if nxt != stop:  # the child skipped items: never trust it again
                    child.kill()
                    raise ChildDied("the sandbox ended a batch early", None)
                child.cpu_used = float(msg.get("cpu") or 0.0)
                return


def _tampered() -> ChildDied:
    return ChildDied("not scored: the reward wrote to the sandbox's result channel (a result that was not asked "
                     "for, or a second one); the batch's results cannot be trusted", None, fatal_for_batch=True,
                     tampered=True)


def _log_room(limits: SandboxLimits) -> int:
    """The most of a sample's log this side keeps (the sandbox cuts it first, adding a short note)."""
    return limits.max_log_chars + 200 if limits.max_log_chars else 0
