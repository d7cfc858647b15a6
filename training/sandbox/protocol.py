"""The calling side of the batch protocol: batches out as columns, results back.

The other side is the harness in `_child.py`, which runs inside the sandbox.

Protocol (one JSON document per line; columns rather than one dict per sample, for speed):
- parent -> child, first line: the config {"source", "name", "filename", "limits", "drop_uid", ...};
- child -> parent: {"ready": true, ...} or {"load_error": msg, "traceback": tb, "lineno": n};
- parent -> child: {"op": "batch", "pos": p, "len": n, "first": bool, "last": bool}: bytes [p, p + n) of
  the shared batch memfd hold one piece of a batch, {"offset": k, "seq0": s, "ds": [...] | str, "sol": [...],
  "gt": [...], "ex": [...] | null, "kwargs": {...}, "exact": bool} ("ds" is one string when all are equal);
- child -> parent: chunks {"i0": first index, "s": [score | null], "t": [[calls, seconds], ...] (the
  chunk's calls in runs, in order: each run's calls share its time), "x": [extra | null] (only when a
  sample returned a dict), "e": [[j, error, traceback, lineno]] (only on errors), "l": [[j, text]] (what sample
j printed, only when it did)}; the last chunk of a
  batch has "end": true and the CPU seconds used. A chunk is sent every 2048 samples or 20 ms, at the
  end of the batch, and by the SIGUSR2 handler when a call runs long.
Calls run in groups through map() (the per-sample Python loop cost more than a simple reward): a group
grows while calls stay under 20 us each and falls back to one call when they do not, or always with
"exact" (for test-runs; the parent then sends one sample a piece and times each on its own clock, as
the reward can write to the result pipe and patch the harness). While a group runs, the shared memfd holds
[seq0 + first, seq0 + end) of it (-1 when idle) and the seq of the last call the watchdog timed out:
the parent reads it to tell which sample was running when it had to kill the harness process (a group of one:
that sample; a bigger group: it scores the rest one call at a time to find out). The watchdog thread
knows the running call exactly (the group's start + the results the group has so far).
"""
from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from training.sandbox.types import Chunk, ScoreResult

FIRST_PIECE, PIECE = 64, 256  # batch pieces: a small first one gets the child going sooner; small ones
# come back as small result chunks, which the caller decodes while the child scores the next
_COLUMNS = (("ds", "data_source"), ("sol", "solution_str"), ("gt", "ground_truth"), ("ex", "extra_info"))
_GETTERS = tuple((col, operator.itemgetter(key)) for col, key in _COLUMNS)


class KeyCheck:
    """VERL builds its reward_extra_info columns from the first sample: all must return the same keys."""

    def __init__(self, enabled: bool = True) -> None:
        self.ref_index: int | None = None
        self.ref_keys: frozenset[str] | None = None
        self.enabled = enabled  # off: a pool checks the whole batch once its shards are back

    def check(self, res: ScoreResult, keys: frozenset[str] | None) -> ScoreResult:
        if res.error is not None or not self.enabled:
            return res
        if self.ref_index is None:
            self.ref_index, self.ref_keys = res.index, keys
            return res
        if keys == self.ref_keys:
            return res
        return res.failing(keys_message(keys, self.ref_keys, self.ref_index))


class LogBudget:
    """What a whole batch keeps of the samples' logs: max_batch_log_chars, in the batch's order (a pool's
    shards, or a sandbox restarted mid-batch, each had a budget of their own in the sandbox)."""

    NOTE = "[output not kept: the batch printed max_batch_log_chars]"

    def __init__(self, chars: int) -> None:
        self.left = chars

    def take(self, res: ScoreResult) -> ScoreResult:
        log = res.log
        if not log or log == self.NOTE:
            return res
        if self.left <= 0:
            res.log = self.NOTE
        elif len(log) > self.left:
            res.log, self.left = log[:self.left] + "… [output cut]", 0
        else:
            self.left -= len(log)
        return res


def keys_message(keys: frozenset[str] | None, ref_keys: frozenset[str] | None, ref_index: int) -> str:
    def show(k: frozenset[str] | None) -> str:
        return "a number" if k is None else "a dict with keys " + repr(sorted({"score", *k}))

    return (f"returned {show(keys)}, but sample {ref_index} of this batch returned {show(ref_keys)}; "
            "every sample must return the same keys")


def columns(items: list[Mapping[str, Any]], first_index: int = 0) -> dict[str, Any]:
    """Items as four columns (cheaper to send and to read than one dict per sample).

    "ds" is a single string when every sample has the same one (the usual case), and "ex" None when
    no sample has extra_info. A TypeError names the first item that is not a dict."""
    if not items:
        return {"ds": [], "sol": [], "gt": [], "ex": None}
    try:  # fast path: dicts that have all four keys; one C loop per column
        cols = {col: list(map(get, items)) for col, get in _GETTERS}
    except (KeyError, TypeError):
        for k, it in enumerate(items):
            if not isinstance(it, Mapping):
                raise TypeError(f"item {first_index + k} is a {type(it).__name__}; expected a dict with "
                                "data_source, solution_str, ground_truth, extra_info") from None
        cols = {c: [it.get(key) for it in items] for c, key in _COLUMNS}
    ds = cols["ds"]
    if type(ds[0]) is str and ds.count(ds[0]) == len(ds):  # equal to a str: all are that str
        cols["ds"] = ds[0]
    if cols["ex"].count(None) == len(cols["ex"]):
        cols["ex"] = None
    return cols


def decode_chunk(msg: dict[str, Any], nxt: int, stop: int, keys: KeyCheck, limit_ms: float,
                 max_log: int = 1 << 16) -> Chunk | None:
    """One result chunk from the child as (scores, runs, special results by index); None when it is
    malformed or out of order. Plain numbers stay in the scores list: no object per sample. What a sample
    printed ("l") is kept on its result, cut at `max_log` characters."""
    scores, runs, extras = msg.get("s"), msg.get("t"), msg.get("x")
    if msg.get("i0", nxt) != nxt or not isinstance(scores, list) or not isinstance(runs, list):
        return None
    m = len(scores)
    if nxt + m > stop or (extras is not None and (not isinstance(extras, list) or len(extras) != m)):
        return None
    late = _late_calls(runs, m, limit_ms)
    kinds = list(map(type, scores))  # C loops (a set of the types costs half as much again)
    floats = kinds.count(float)
    nones = 0 if floats == m else kinds.count(type(None))
    if late is None or floats + nones != m:
        return None
    fails = _failures(msg.get("e"), late, m, limit_ms)
    logs = _logs(msg.get("l"), m, max_log)
    if fails is None or logs is None:
        return None
    if extras is None and not fails and keys.ref_keys is None and not nones and not logs:
        # the common case, kept in C loops: every sample returned a number, as the first one did
        if keys.ref_index is None and m:
            keys.ref_index = nxt
        return scores, runs, {}
    return _special_results(scores, runs, extras, fails, logs, nxt, keys)


def _late_calls(runs: list[Any], m: int, limit_ms: float) -> list[int] | None:
    """Indexes of calls that swallowed their timeout and returned late; None when `runs` is malformed
    or does not cover the chunk's m samples. A run is [calls, seconds]."""
    calls, late = 0, []
    for run in runs:
        if not (isinstance(run, list) and len(run) == 2 and type(run[0]) is int and run[0] > 0
                and isinstance(run[1], (int, float)) and run[1] >= 0):
            return None
        if run[0] == 1 and run[1] * 1000.0 > limit_ms:
            late.append(calls)
        calls += run[0]
    return late if calls == m else None


def _failures(errors: Any, late: list[int], m: int, limit_ms: float) -> dict[int, list[Any]] | None:
    """The chunk's failed samples by index ([index, error, traceback, line]); None when malformed."""
    fails: dict[int, list[Any]] = {}
    for err in errors or ():
        if not isinstance(err, list) or len(err) != 4 or not isinstance(err[0], int) or not 0 <= err[0] < m:
            return None
        fails[err[0]] = err
    for j in late:
        fails.setdefault(j, [j, f"timed out after {limit_ms / 1000:g} s (time_limit_s)", None, None])
    return fails


def _logs(items: Any, m: int, max_log: int) -> dict[int, str] | None:
    """What each sample printed, by index, cut at max_log characters; None when malformed."""
    logs: dict[int, str] = {}
    for item in items or ():
        if not (isinstance(item, list) and len(item) == 2 and type(item[0]) is int and 0 <= item[0] < m
                and isinstance(item[1], str)):
            return None
        logs[item[0]] = item[1][:max_log]
    return logs


def _special_results(scores: list[Any], runs: list[Any], extras: list[Any] | None, fails: dict[int, list[Any]],
                     logs: dict[int, str], nxt: int, keys: KeyCheck) -> Chunk | None:
    """The slow path: a ScoreResult for every sample that failed, returned extras or printed."""
    m = len(scores)
    durations = [seconds * 1000.0 / n for n, seconds in runs for _ in range(n)]
    special: dict[int, ScoreResult] = {}
    out = list(scores)
    for j in range(m):
        if j in fails:
            _, err, tb, line = fails[j]
            special[nxt + j] = ScoreResult(nxt + j, None, {}, str(err), tb if isinstance(tb, str) else None,
                                           line if isinstance(line, int) else None, durations[j], logs.get(j))
            out[j] = None
            continue
        score = scores[j]
        extra = extras[j] if extras is not None else None
        if score is None or (extra is not None and not isinstance(extra, dict)):
            return None
        log = logs.get(j)
        res = keys.check(ScoreResult(nxt + j, score, extra if extra is not None else {}, None, None, None,
                                     durations[j], log), frozenset(extra) if extra is not None else None)
        if res.error is not None:
            out[j] = None
        if res.error is not None or extra or log:
            special[nxt + j] = res
    return out, runs, special


def pieces(start: int, stop: int) -> list[tuple[int, int]]:
    """[start, stop) cut into a small first piece (the child starts sooner) and then bigger ones."""
    out, a, size = [], start, FIRST_PIECE
    while a < stop:
        b = min(stop, a + size)
        out.append((a, b))
        a, size = b, PIECE
    return out or [(start, stop)]


def failed(start: int, stop: int, reason: str) -> Chunk:
    """Samples start..stop-1 not scored, for `reason`."""
    return fail_results([ScoreResult(i, None, {}, reason) for i in range(start, stop)])


def fail_results(results: list[ScoreResult]) -> Chunk:
    """Consecutive failed ScoreResults as a chunk."""
    return [None] * len(results), [[len(results), 0.0]] if results else [], {r.index: r for r in results}
