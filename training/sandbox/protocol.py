"""The calling side of the batch protocol (see `_child.py`): batches out as columns, results back."""
from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any

from training.sandbox.types import OkResult, ScoreResult

FIRST_PIECE, PIECE = 64, 256  # batch pieces: a small first one gets the child going sooner; small ones
# come back as small result chunks, which the caller decodes while the child scores the next (+7-9% vs 128/512)
_SCORE_TYPES = frozenset((float, type(None)))
_COLUMNS = (("ds", "data_source"), ("sol", "solution_str"), ("gt", "ground_truth"), ("ex", "extra_info"))
_GET_ALL = operator.itemgetter(*(key for _, key in _COLUMNS))


class KeyCheck:
    """VERL builds its reward_extra_info columns from the first sample: all must return the same keys."""

    def __init__(self) -> None:
        self.ref_index: int | None = None
        self.ref_keys: frozenset[str] | None = None

    def check(self, res: ScoreResult, keys: frozenset[str] | None) -> ScoreResult:
        if res.error is not None:
            return res
        if self.ref_index is None:
            self.ref_index, self.ref_keys = res.index, keys
            return res
        if keys == self.ref_keys:
            return res
        return ScoreResult(res.index, None, res.extra, _keys_message(keys, self.ref_keys, self.ref_index), None,
                           None, res.duration_ms)


def _keys_message(keys: frozenset[str] | None, ref_keys: frozenset[str] | None, ref_index: int) -> str:
    def show(k: frozenset[str] | None) -> str:
        return "a number" if k is None else "a dict with keys " + repr(sorted({"score", *k}))

    return (f"returned {show(keys)}, but sample {ref_index} of this batch returned {show(ref_keys)}; "
            "every sample must return the same keys")


def columns(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The batch as four columns (cheaper to send and to read than one dict per sample)."""
    items = items if isinstance(items, list) else list(items)
    try:  # fast path: dicts that have all four keys; one pass, transposed by zip (tuples send as lists)
        if not items:
            return {"ds": [], "sol": [], "gt": [], "ex": None}
        ds, sol, gt, ex = zip(*map(_GET_ALL, items))
        cols = {"ds": ds, "sol": sol, "gt": gt, "ex": ex}  # type: ignore[dict-item]
    except (KeyError, TypeError):
        for k, it in enumerate(items):
            if not isinstance(it, Mapping):
                raise TypeError(f"item {k} is a {type(it).__name__}; expected a dict with data_source, "
                                "solution_str, ground_truth, extra_info") from None
        cols = {c: [it.get(key) for it in items] for c, key in _COLUMNS}
    if cols["ex"].count(None) == len(cols["ex"]):
        cols["ex"] = None  # type: ignore[assignment]
    return cols


def decode_chunk(msg: dict[str, Any], nxt: int, stop: int, keys: KeyCheck,
                  limit_ms: float) -> list[ScoreResult] | None:
    """Turn one result chunk from the child into ScoreResults; None when it is malformed or out of order."""
    scores, extras, errors = msg.get("s", []), msg.get("x"), msg.get("e")
    if msg.get("i0", nxt) != nxt or not isinstance(scores, list):
        return None
    m = len(scores)
    if nxt + m > stop or (extras is not None and (not isinstance(extras, list) or len(extras) != m)):
        return None
    durations = chunk_durations(msg, m)
    if durations is None:
        return None
    kinds = set(map(type, scores))  # C loops: a generator over 512 scores costs ~20 us a chunk
    if not kinds <= _SCORE_TYPES:
        return None
    fails: dict[int, list[Any]] = {}
    for err in errors or ():
        if not isinstance(err, list) or len(err) != 4 or not isinstance(err[0], int) or not 0 <= err[0] < m:
            return None
        fails[err[0]] = err
    if m and max(durations) > limit_ms:  # a call that swallowed its timeout and returned late
        for j, ms in enumerate(durations):
            if ms > limit_ms and j not in fails:
                fails[j] = [j, f"timed out after {limit_ms / 1000:g} s (time_limit_s)", None, None]
    if extras is None and not fails and keys.ref_keys is None and type(None) not in kinds:
        # the common case, kept in C loops: every sample returned a number, as the first one did
        if keys.ref_index is None and m:
            keys.ref_index = nxt
        return list(map(OkResult, range(nxt, nxt + m), scores, durations))
    out = []
    for j in range(m):
        if j in fails:
            _, err, tb, line = fails[j]
            out.append(ScoreResult(nxt + j, None, {}, str(err), tb if isinstance(tb, str) else None,
                                   line if isinstance(line, int) else None, durations[j]))
            continue
        score = scores[j]
        extra = extras[j] if extras is not None else None
        if score is None or (extra is not None and not isinstance(extra, dict)):
            return None
        res = ScoreResult(nxt + j, score, extra if extra is not None else {}, None, None, None, durations[j])
        out.append(keys.check(res, frozenset(extra) if extra is not None else None))
    return out


def chunk_durations(msg: dict[str, Any], m: int) -> list[float] | None:
    """Per-sample milliseconds: the child times slow calls one by one; faster ones share the rest."""
    total, slow = msg.get("dt", 0.0), msg.get("slow") or []
    if not isinstance(total, (int, float)) or not isinstance(slow, list):
        return None
    exact: dict[int, float] = {}
    for entry in slow:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and 0 <= entry[0] < m
                and isinstance(entry[1], (int, float))):
            return None
        exact[entry[0]] = entry[1] * 1000.0
    fast = m - len(exact)
    share = max(0.0, total * 1000.0 - sum(exact.values())) / fast if fast else 0.0
    out = [share] * m
    for j, ms in exact.items():
        out[j] = ms
    return out


def pieces(start: int, stop: int) -> list[tuple[int, int]]:
    """[start, stop) cut into a small first piece (the child starts sooner) and then bigger ones."""
    out, a, size = [], start, FIRST_PIECE
    while a < stop:
        b = min(stop, a + size)
        out.append((a, b))
        a, size = b, PIECE
    return out or [(start, stop)]


def fail(start: int, n: int, reason: str) -> list[ScoreResult]:
    return [ScoreResult(i, None, {}, reason) for i in range(start, n)]
