"""SandboxPool: one batch scored by several sandboxes at once, in order, as if by one.

    with SandboxPool(source, size=pool_size(job_reward_workers)) as pool:
        batch = pool.score_batch(items)      # a ScoreBatch, same as RewardSandbox.score_batch
        batch.slowest(5)                     # [(index, ms), ...]: the samples that took longest

Each member is a full `RewardSandbox` (its own process, namespaces, limits, private /tmp): the pool
adds no process that runs user code outside a sandbox. A batch is cut into shards that the members
take in turn (a member that finishes early takes the next shard, so one slow sample holds up only its
shard); a call that hangs is stopped by its own sandbox's per-call limit (`time_limit_s`) and, if it
does not stop, that sandbox alone is killed and restarted: the other members never notice, and the
hung sample is the only one that fails. Results come back in the batch's order, and the batch-wide
rule that every sample returns the same keys is checked once the shards are back, as one sandbox would.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from training.sandbox.protocol import LogBudget, failed, keys_message
from training.sandbox.runner import RewardSandbox
from training.sandbox.types import SandboxLimits, ScoreBatch, ScoreResult

MAX_WORKERS = 64
AUTO_WORKERS_CAP = 4  # with no budget set, a job scores with min(cores, 4) sandboxes
_SHARDS_PER_MEMBER = 4  # more, smaller shards share out slow samples better; each costs a round trip
_MAX_SHARD = 512


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def pool_size(reward_workers: int | None = None, share: int = 1) -> int:
    """Sandboxes for one scorer: the job's `reward_workers` (None: min(CPUs, 4)) split over `share`
    processes that each run a pool (VERL's reward workers), at least one each."""
    if reward_workers is not None and (isinstance(reward_workers, bool) or not isinstance(reward_workers, int)
                                       or not 1 <= reward_workers <= MAX_WORKERS):
        raise ValueError(f"reward_workers must be a whole number from 1 to {MAX_WORKERS}, not {reward_workers!r}")
    total = reward_workers if reward_workers is not None else min(cpu_count(), AUTO_WORKERS_CAP)
    return max(1, total // max(1, int(share)))


def shards(n: int, members: int) -> list[tuple[int, int]]:
    """[0, n) cut into contiguous shards: about _SHARDS_PER_MEMBER per member, at most _MAX_SHARD each."""
    if n <= 0:
        return []
    size = max(1, min(_MAX_SHARD, -(-n // (members * _SHARDS_PER_MEMBER))))
    return [(a, min(n, a + size)) for a in range(0, n, size)]


class SandboxPool:
    """`size` sandboxes scoring the shards of each batch in parallel; the RewardSandbox interface.

    `score_batch` and `iter_scores` never raise for what the user code does; `start` (or `__enter__`)
    raises RewardLoadError when the source cannot be loaded. Every other argument is RewardSandbox's."""

    def __init__(self, source: str, name: str = "compute_score", limits: SandboxLimits | None = None,
                 hidden_paths: Iterable[str | os.PathLike[str]] = (), *, size: int | None = None,
                 **sandbox_kwargs: Any) -> None:
        self.size = pool_size(size)
        hidden = [os.fspath(p) for p in hidden_paths]
        self.members = [RewardSandbox(source, name, limits, hidden, **sandbox_kwargs) for _ in range(self.size)]
        self.limits = self.members[0].limits
        self._threads: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # one batch at a time, as a RewardSandbox

    # ---- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> SandboxPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def mode(self) -> str:
        return self.members[0].mode

    @property
    def cpu_seconds(self) -> float:
        return sum(m.cpu_seconds for m in self.members)

    @property
    def load_log(self) -> str:
        """What the reward printed while loading (in the first member: they all load the same module)."""
        return self.members[0].load_log

    def start(self) -> None:
        """Start every member at once (loading a reward that imports torch takes seconds each)."""
        if self.size == 1:
            self.members[0].start()
            return
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="sandbox-pool")
        started = [self._threads.submit(m.start) for m in self.members]
        errors = [f.exception() for f in started]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            self.close()
            raise first

    def close(self, wait: bool = True) -> None:
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=wait, cancel_futures=True)
        for m in self.members:
            m.close()

    def __del__(self) -> None:  # a forgotten pool must not outlive its owner (nor wait on a thread here)
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close(wait=False)

    # ---- scoring -----------------------------------------------------------------------------------
    def score_batch(self, items: Iterable[Mapping[str, Any]]) -> ScoreBatch:
        """Score every item over the pool; one result per item, in order (failures carry `error`)."""
        items = items if isinstance(items, list) else list(items)
        if self.size == 1:
            return self.members[0].score_batch(items)
        out = ScoreBatch()
        for part in self._shard_results(items):
            out.extend(part)
        _check_keys(out)
        out.cap_logs(LogBudget(self.limits.max_batch_log_chars))
        return out

    def iter_scores(self, items: Iterable[Mapping[str, Any]], *,
                    deadline: float | None = None) -> Iterator[ScoreResult]:
        """Yield one ScoreResult per item, in order, a shard at a time as the shards finish; `deadline`
        (time.monotonic()) ends the batch sooner than batch_time_limit_s would (a test-run's wall clock)."""
        items = items if isinstance(items, list) else list(items)
        if self.size == 1:
            yield from self.members[0].iter_scores(items, deadline=deadline)
            return
        ref: list[Any] = [None, None]  # (index, keys) of the batch's first scored sample
        budget = LogBudget(self.limits.max_batch_log_chars)
        base = 0
        for part in self._shard_results(items, deadline):
            for res in part:
                yield budget.take(_checked(_shifted(res, base), ref))
            base += len(part)

    def _shard_results(self, items: list[Mapping[str, Any]], until: float | None = None) -> Iterator[ScoreBatch]:
        """Each shard's ScoreBatch, in order, while the members score the later ones."""
        for k, it in enumerate(items):
            if not isinstance(it, Mapping):
                raise TypeError(f"item {k} is a {type(it).__name__}; expected a dict with "
                                "data_source, solution_str, ground_truth, extra_info")
        parts = shards(len(items), self.size)
        if not parts:
            return
        with self._lock:
            if self._threads is None:
                self.start()
            assert self._threads is not None
            deadline = time.monotonic() + self.limits.batch_time_limit_s
            deadline = deadline if until is None else min(deadline, until)
            results: list[Future] = [Future() for _ in parts]
            state = {"next": 0, "stop": False}
            claim = threading.Lock()

            def drain(member: RewardSandbox) -> None:
                while True:
                    with claim:
                        k = state["next"]
                        if k >= len(parts) or state["stop"]:
                            return
                        state["next"] = k + 1
                    a, b = parts[k]
                    if time.monotonic() >= deadline:
                        results[k].set_result(_failed(b - a, "the batch took longer than "
                                                      f"{self.limits.batch_time_limit_s:g} s (batch_time_limit_s)"))
                        continue
                    try:
                        results[k].set_result(member.score_batch(items[a:b], check_keys=False, deadline=deadline))
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller, in order
                        results[k].set_exception(exc)

            running = [self._threads.submit(drain, m) for m in self.members]
            try:
                for fut in results:
                    yield fut.result()
            finally:
                with claim:
                    state["stop"] = True  # the caller stopped early, or a shard failed: take no more
                for r in running:
                    r.result()


def _failed(n: int, reason: str) -> ScoreBatch:
    out = ScoreBatch()
    out.add(failed(0, n, reason))
    return out


def _shifted(res: ScoreResult, base: int) -> ScoreResult:
    if not base:
        return res
    return res.at(res.index + base)


def _keys(res_extra: dict | None) -> frozenset[str] | None:
    return frozenset(res_extra) if res_extra else None


def _checked(res: ScoreResult, ref: list[Any]) -> ScoreResult:
    """`res`, failed if its keys differ from those of the batch's first scored sample (`ref`)."""
    if res.error is not None:
        return res
    keys = _keys(res.extra)
    if ref[0] is None:
        ref[0], ref[1] = res.index, keys
        return res
    if keys == ref[1]:
        return res
    return res.failing(keys_message(keys, ref[1], ref[0]))


def _check_keys(batch: ScoreBatch) -> None:
    """Every sample must return the same keys as the batch's first scored one (VERL builds its extra-info
    columns from it); checked over the whole batch, as the shards were scored without it."""
    special = batch.special
    if not any(r.error is None and r.extra for r in special.values()):
        return  # every scored sample returned a number
    ref: list[Any] = [None, None]
    for i, score in enumerate(batch.scores):
        if score is None:
            continue
        res = special.get(i)
        res = res if res is not None else ScoreResult(i, score, None, None, None, None, batch.durations_ms[i])
        checked = _checked(res, ref)
        if checked is not res:
            batch.replace(checked)

