"""Values that cross the sandbox's result pipe: scores, errors, tracebacks, the chunk message.

Part of the harness that runs INSIDE the sandbox process: `isolation.harness_source()` puts this file's
text before `_child.py`'s, so both may use only the standard library (orjson when installed).
"""
import math
import os
import traceback

try:
    import orjson

    def _dumps(obj: object) -> bytes:
        return orjson.dumps(obj, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)

    _loads = _loads_view = orjson.loads  # orjson parses a memoryview in place
except ImportError:  # the sandbox still works without orjson, only slower
    import json

    def _dumps(obj: object) -> bytes:
        return json.dumps(obj, default=_json_default, allow_nan=False).encode()

    _loads = json.loads

    def _loads_view(view: memoryview) -> object:
        return json.loads(bytes(view))

_MAX_TB = 8000
_MAX_MSG = 300
_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
__all__ = ["_ARGS", "_BadReturn", "_Timeout", "_binds_positionally", "_chunk_message", "_clip_extra", "_dumps",
           "_finite_floats",
           "_loads", "_loads_view", "_short", "_tb_text", "_to_score", "_user_lineno", "_write"]


class _Timeout(BaseException):
    """Raised in user code by the watchdog; BaseException so that `except Exception` does not eat it."""


class _BadReturn(Exception):
    pass


def _json_default(obj: object) -> object:
    for attr in ("item", "tolist"):
        fn = getattr(obj, attr, None)
        if callable(fn):
            try:
                return fn()
            except Exception:  # noqa: BLE001 - fall through to repr
                pass
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return repr(obj)[:200]


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MSG else text[: _MAX_MSG - 3] + "..."


def _finite_floats(values: list) -> bool:
    """Whether every value is a finite float (C loops: the common case costs ~15 ns a value)."""
    if not values:
        return True
    if list(map(type, values)).count(float) != len(values):  # faster than a set of the types
        return False
    total = sum(values)
    return total - total == 0.0  # NaN or inf anywhere makes the sum NaN or inf (an overflow: the slow path)


def _binds_positionally(fn: object) -> bool:
    """Whether fn(d, s, g, e) binds exactly as fn(data_source=d, solution_str=s, ...) does: a plain
    function whose first four parameters are those (positional calls are cheaper, and map() makes them)."""
    code = getattr(fn, "__code__", None)
    return (type(fn).__name__ == "function" and code is not None and code.co_argcount >= 4
            and code.co_posonlyargcount == 0 and tuple(code.co_varnames[:4]) == _ARGS)


def _to_score(value: object, what: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        score = float(value)
    elif isinstance(value, (str, bytes)):
        raise _BadReturn(f"returned a {type(value).__name__} ({value[:40]!r}) as {what}; expected a number")
    elif value is None:
        raise _BadReturn(f"returned None as {what}; expected a number (a missing `return`?)")
    else:
        item = getattr(value, "item", None)  # numpy / torch scalars
        try:
            score = float(item()) if callable(item) else float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise _BadReturn(f"returned a {type(value).__name__} as {what}; expected a number") from None
    if math.isnan(score):
        raise _BadReturn(f"returned NaN as {what}")
    if math.isinf(score):
        raise _BadReturn(f"returned {'-' if score < 0 else ''}inf as {what}")
    return score


def _clip_extra(extra: dict, limit: int) -> dict:
    """Extras whose JSON is longer than `limit`: each value over its share becomes its JSON text, cut, with a
    marker (the keys stay: VERL needs the same keys from every sample). Done here, per sample, so a reward
    returning 40 MB per sample never sends more than about `limit` characters of it."""
    share = max(32, limit // max(1, len(extra)))
    out = {}
    for key, value in extra.items():
        text = _dumps(value).decode("utf-8", "replace")
        out[key] = value if len(text) <= share else text[:share] + f"… [{len(text) - share:,} more characters]"
    if len(_dumps(out)) > 2 * limit + 64:  # the keys alone are too many
        raise _BadReturn(f"returned {len(extra):,} extra keys: more than max_extra_chars={limit} can hold")
    return out


def _user_lineno(exc: BaseException, filename: str) -> int | None:
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        return exc.lineno
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _tb_text(exc: BaseException, filename: str) -> str:
    """The traceback from the first frame of user code on (the harness frames are noise)."""
    tb = exc.__traceback__
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename != filename:
        first = first.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, first or tb))
    return text if len(text) <= _MAX_TB else "...\n" + text[-_MAX_TB:]


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data + b"\n")
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _chunk_message(st: list, lo: int, hi: int, rlo: int, rhi: int, logs: dict | None = None) -> bytes:
    """Results lo..hi-1 (runs rlo..rhi-1) of the open chunk `st` as one message; with them go (and leave
    `logs`, by sample index) what those samples printed."""
    scores, runs, special = st[0], st[1], st[2]
    msg: dict = {"i0": st[3] + lo, "s": scores[lo:hi] if lo or hi != len(scores) else scores,
                 "t": runs[rlo:rhi] if rlo or rhi != len(runs) else runs}
    if logs:
        first = st[3] + lo
        sent = [[i - first, "".join(logs.pop(i)[1])] for i in sorted(logs) if first <= i < first + hi - lo]
        if sent:
            msg["l"] = sent
    part = {j - lo: v for j, v in special.items() if lo <= j < hi} if special else None
    if part:
        if any(kind == "x" for kind, _ in part.values()):
            extras = [None] * (hi - lo)
            for j, (kind, payload) in part.items():
                if kind == "x":
                    extras[j] = payload
            msg["x"] = extras
        errors = [[j, *payload] for j, (kind, payload) in part.items() if kind == "e"]
        if errors:
            msg["e"] = errors
    return _dumps(msg)
