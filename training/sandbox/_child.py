"""The harness that runs INSIDE the sandbox process; it is the only code that touches user code.

It is started as `python -s -P -c <this file's text>` (the project dir is hidden in the sandbox, so it
cannot be imported), and must therefore only use the standard library (orjson when installed).

Protocol (one JSON document per line; columns rather than one dict per sample, for speed):
- parent -> child, first line: the config {"source", "name", "filename", "limits", "drop_uid", ...};
- child -> parent: {"ready": true, ...} or {"load_error": msg, "traceback": tb, "lineno": n};
- parent -> child: {"op": "batch", "pos": p, "len": n, "first": bool, "last": bool}: bytes [p, p + n) of
  the shared batch memfd hold one piece of a batch, {"offset": k, "seq0": s, "ds": [...], "sol": [...],
  "gt": [...], "ex": [...] | null, "kwargs": {...}};
- child -> parent: chunks {"i0": first index, "s": [score | null], "dt": seconds for the chunk,
  "slow": [[j, seconds]] (calls of 20 us or more; faster ones get the chunk's average),
  "x": [extra | null] (only when a sample returned a dict), "e": [[j, error, traceback, lineno]]
  (only on errors)}; the last chunk of a piece has "end": true and the CPU seconds used.
  A chunk is sent every 512 samples or 20 ms, and by the SIGUSR2 handler when a call runs long.
While sample `offset + j` runs, the shared 8-byte memfd holds `seq0 + j` (-1 when idle): the parent
reads it to tell which sample was running when it had to kill this process, and the watchdog thread
reads it to see that one call has been running for too long.
"""
from __future__ import annotations

import itertools
import math
import os
import resource
import signal
import sys
import threading
import time
import traceback

try:
    import orjson

    def _dumps(obj: object) -> bytes:
        return orjson.dumps(obj, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)

    _loads = orjson.loads
except ImportError:  # the sandbox still works without orjson, only slower
    import json

    def _dumps(obj: object) -> bytes:
        return json.dumps(obj, default=_json_default, allow_nan=False).encode()

    _loads = json.loads

_MAX_TB = 8000
_MAX_MSG = 300
_FLUSH_EVERY = 512
_FLUSH_AFTER_S = 0.02
_SLOW_S = 2e-5  # calls this long get their own duration; faster ones share their chunk's average


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


# Read by the SIGUSR1 handler: only raise the timeout while user code runs, never in the harness.
_IN_USER = False
_FORKED = False  # set in a child forked by user code: it must never reach the result pipe
_T_PREV = 0.0  # when the last call returned (the current call started then)
LOAD_SEQ = 1  # the memfd value while the module loads; batches start at 2


def _mark_forked() -> None:
    global _FORKED
    _FORKED = True


class Harness:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.filename = cfg.get("filename") or "reward.py"
        self.limits = cfg["limits"]
        self.time_limit = float(self.limits["time_limit_s"])
        self.limit_now = float(self.limits["load_time_limit_s"])  # what the watchdog enforces right now
        self.main_tid = threading.get_ident()
        self.loop = None
        self.fn = None
        self.idx = memoryview(bytearray(8)).cast("q")  # replaced by the shared memfd when there is one
        self.idx[0] = -1
        self.fired = -1
        self.pidns = bool(cfg.get("pidns"))
        self.out_fd = -1
        # the open chunk, shared with the flush handler: [scores, slow, special, i0, sent, t_sent]
        self.chunk: list | None = None

    # ---- setup -----------------------------------------------------------------------------
    def apply_limits(self) -> None:
        lim = self.limits
        mem = int(lim["memory_mb"]) << 20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        fsize = int(lim["max_file_mb"]) << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        nproc = int(lim["max_procs"]) + int(self.cfg.get("nproc_base") or 0)
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        hard = int(self.cfg["cpu_hard_s"])
        soft = min(hard, int(math.ceil(_cpu_used() + float(lim["load_time_limit_s"]))))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

    def drop_privileges(self) -> None:
        """As root (bwrap without a user namespace): give up root before any user code runs."""
        uid = int(self.cfg["drop_uid"])
        if os.getuid() != 0:
            return
        if self.cfg.get("private_tmp"):
            os.chmod(self.cfg["private_tmp"], 0o1777)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:  # pragma: no cover - would mean the drop did not happen
            raise RuntimeError("could not drop root privileges")

    def set_parent_death_signal(self) -> None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001 - best effort (bwrap's --die-with-parent covers the main mode)
            pass

    def open_index(self) -> None:
        fd = self.cfg.get("index_fd")
        if fd is None:
            return
        import mmap

        mm = mmap.mmap(int(fd), 8)
        os.close(int(fd))
        self.idx = memoryview(mm).cast("q")

    def load(self) -> dict:
        """Compile and run the user's module; return the ready message or a load_error message."""
        global _IN_USER
        import linecache
        import types

        source: str = self.cfg["source"]
        name: str = self.cfg.get("name") or "compute_score"
        linecache.cache[self.filename] = (len(source), None, source.splitlines(True), self.filename)
        try:
            code = compile(source, self.filename, "exec")
        except SyntaxError as exc:
            return {"load_error": _short(f"SyntaxError: {exc.msg}"), "traceback": _tb_text(exc, self.filename),
                    "lineno": exc.lineno}
        mod = types.ModuleType("custom_module")  # the module name VERL's loader uses
        mod.__file__ = self.filename
        sys.modules["custom_module"] = mod
        self.idx[0] = LOAD_SEQ
        try:
            _IN_USER = True
            exec(code, mod.__dict__)  # noqa: S102 - this process is the sandbox
            _IN_USER = False
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            _IN_USER = False
            if _FORKED:
                os._exit(70)
            what = "it took longer than load_time_limit_s" if isinstance(exc, _Timeout) else \
                f"{type(exc).__name__}: {exc}"
            return {"load_error": _short(f"error while loading the reward module: {what}"),
                    "traceback": _tb_text(exc, self.filename), "lineno": _user_lineno(exc, self.filename)}
        finally:
            self.idx[0] = -1
            self.limit_now = self.time_limit
        if _FORKED:
            os._exit(0)
        fn = getattr(mod, name, None)
        if fn is None:
            return {"load_error": f"the reward module defines no {name!r}", "traceback": None, "lineno": None}
        if not callable(fn):
            return {"load_error": f"{name!r} is a {type(fn).__name__}, not a function", "traceback": None,
                    "lineno": None}
        self.fn = fn
        return {"ready": True, "uid": os.getuid(), "pid": os.getpid()}

    # ---- watchdog ----------------------------------------------------------------------------
    def start_watchdog(self) -> None:
        signal.signal(signal.SIGUSR1, self._on_timeout_signal)
        signal.signal(signal.SIGUSR2, self._on_flush_signal)
        os.register_at_fork(after_in_child=_mark_forked)
        threading.Thread(target=self._watchdog, args=(0.01,), daemon=True, name="sandbox-watchdog").start()

    def _on_timeout_signal(self, signum: int, frame: object) -> None:
        if _IN_USER and not _FORKED and self.idx[0] == self.fired:
            raise _Timeout()

    def _on_flush_signal(self, signum: int, frame: object) -> None:
        """A call is taking long: send the results finished before it (runs in the main thread)."""
        st = self.chunk
        if not _IN_USER or _FORKED or st is None:  # lists are only stable while user code runs
            return
        scores, slow, special, i0, sent, t_sent = st
        k = len(scores)
        if k > sent:
            _write(self.out_fd, self._chunk(i0, t_sent, _T_PREV, scores, slow, special, sent, k))
            st[4], st[5] = k, _T_PREV

    def _watchdog(self, tick: float) -> None:
        """Watch the memfd: a call running too long gets SIGUSR1 (timeout); one running for a while
        with finished results not yet sent gets SIGUSR2 (flush), so results stream as they come."""
        seen, since, last_fire, flushed = -1, 0.0, 0.0, -1
        while True:
            time.sleep(tick)
            cur, now = self.idx[0], time.monotonic()
            if cur != seen:
                seen, since = cur, now
                continue
            if cur < 0:
                continue
            st = self.chunk
            if (flushed != cur and now - since >= _FLUSH_AFTER_S and _IN_USER and st is not None
                    and len(st[0]) > st[4]):
                flushed = cur
                try:
                    signal.pthread_kill(self.main_tid, signal.SIGUSR2)
                except (OSError, ValueError):
                    return
            if now - since <= self.limit_now:
                continue
            # re-signal every 0.5 s in case the user code swallowed the first one (bare `except:`)
            if self.fired != cur or now - last_fire > 0.5:
                self.fired, last_fire = cur, now
                try:
                    signal.pthread_kill(self.main_tid, signal.SIGUSR1)
                except (OSError, ValueError):
                    return

    # ---- scoring -------------------------------------------------------------------------------
    def _await(self, value: object) -> object:
        import asyncio

        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        try:
            return self.loop.run_until_complete(value)  # type: ignore[arg-type]
        except BaseException:
            self.loop = None  # a loop interrupted mid-run is not reused
            raise

    def run_batch(self, msg: dict, out_fd: int, first: bool = True, last: bool = True) -> None:
        """Score one batch, sending results in chunks. Kept lean: this loop is the sandbox's throughput."""
        global _IN_USER
        offset, seq0 = int(msg["offset"]), int(msg["seq0"])
        ex = msg["ex"] if msg["ex"] is not None else itertools.repeat(None)
        kwargs = msg.get("kwargs") or None
        if first:  # RLIMIT_CPU: batch_time_limit_s more CPU seconds for this batch (all its pieces)
            hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
            soft = int(math.ceil(_cpu_used() + float(self.limits["batch_time_limit_s"])))
            resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        fn, idx, perf = self.fn, self.idx, time.perf_counter
        global _T_PREV
        self.out_fd = out_fd
        scores: list = []
        slow: dict = {}  # position in chunk -> seconds, for calls of _SLOW_S or more (the rest: chunk average)
        special: dict = {}  # position in chunk -> ("x", extra dict) | ("e", error entry): rare
        add_score = scores.append
        seq = chunk_seq = seq0
        t_start = t_prev = _T_PREV = perf()
        flush_at = t_start + _FLUSH_AFTER_S
        flush_seq = seq0 + _FLUSH_EVERY
        slow_s = _SLOW_S  # globals read per sample, bound once (the flags below must stay global)
        st = self.chunk = [scores, slow, special, offset, 0, t_start]
        for d, s, g, e in zip(msg["ds"], msg["sol"], msg["gt"], ex):
            idx[0] = seq
            try:
                _IN_USER = True
                if kwargs is None:
                    value = fn(data_source=d, solution_str=s, ground_truth=g, extra_info=e)
                else:
                    value = fn(data_source=d, solution_str=s, ground_truth=g, extra_info=e, **kwargs)
                if value.__class__ is not float or value - value != 0.0:  # not a finite float: the slow path
                    value = self._normalise(value)
                    if value.__class__ is tuple:
                        special[seq - chunk_seq] = ("x", value[1])
                        value = value[0]
                _IN_USER = False
                if _FORKED:  # a fork of the harness must never reach the result pipe
                    os._exit(0)
            except BaseException as exc:  # noqa: BLE001 - a user error is reported for this sample only
                _IN_USER = False
                if _FORKED:
                    os._exit(70)
                special[seq - chunk_seq] = ("e", self._error(exc))
                value = None
            add_score(value)
            t1 = perf()
            if t1 - t_prev >= slow_s:
                slow[seq - chunk_seq] = t1 - t_prev
            t_prev = _T_PREV = t1
            seq += 1
            if t1 >= flush_at or seq >= flush_seq:
                _write(out_fd, self._chunk(st[3], st[5], t1, scores, slow, special, st[4], len(scores)))
                scores, slow, special = [], {}, {}
                add_score = scores.append
                chunk_seq, flush_at, flush_seq = seq, t1 + _FLUSH_AFTER_S, seq + _FLUSH_EVERY
                st = self.chunk = [scores, slow, special, offset + seq - seq0, 0, t1]
        self.chunk = None
        idx[0] = -1
        if last and self.pidns:
            _kill_strays()
        last_chunk = self._chunk(st[3], st[5], t_prev, scores, slow, special, st[4], len(scores))
        _write(out_fd, last_chunk[:-1] + b',"end":true,"cpu":' + repr(_cpu_used()).encode() + b"}")

    def _chunk(self, i0: int, t_start: float, t_end: float, scores: list, slow: dict, special: dict,
               lo: int, hi: int) -> bytes:
        """Results lo..hi-1 of the open chunk (whose first sample is i0) as one message.

        The parent turns "dt" and "slow" into per-sample durations, and late calls into timeouts."""
        msg: dict = {"i0": i0 + lo, "s": scores[lo:hi] if lo or hi != len(scores) else scores,
                     "dt": t_end - t_start}
        slow_part = [[j - lo, sec] for j, sec in slow.items() if lo <= j < hi]
        if slow_part:
            msg["slow"] = slow_part
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

    def _normalise(self, value: object) -> float | tuple:
        """A non-float return: await it, then a number -> float, a dict -> (score, extra); else _BadReturn."""
        if hasattr(value, "__await__"):
            value = self._await(value)
        if isinstance(value, dict):
            if "score" not in value:
                keys = ", ".join(sorted(map(str, value))) or "none"
                raise _BadReturn(f"returned a dict without a 'score' key (keys: {keys})")
            extra = {str(k): v for k, v in value.items() if k != "score"}
            try:
                _dumps(extra)
            except Exception as exc:  # noqa: BLE001 - fail this sample, not the chunk
                raise _BadReturn(_short(f"returned extra values that cannot be sent: {exc}")) from None
            return (_to_score(value["score"], "dict['score']"), extra)
        return _to_score(value, "value")

    def _error(self, exc: BaseException) -> list:
        """[short reason, traceback, line in the user's source] for a failed call."""
        if isinstance(exc, _Timeout):
            err = f"timed out after {self.time_limit:g} s (time_limit_s)"
        elif isinstance(exc, _BadReturn):
            return [str(exc), None, None]
        elif isinstance(exc, MemoryError):
            err = f"MemoryError: ran out of memory (memory_mb={self.limits['memory_mb']})"
        elif isinstance(exc, SystemExit):
            err = f"called sys.exit({exc.code!r})"
        else:
            err = f"{type(exc).__name__}: {exc}"
        return [_short(err), _tb_text(exc, self.filename), _user_lineno(exc, self.filename)]


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


def _cpu_used() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


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


def _kill_strays() -> None:
    """In a private PID namespace: kill and reap what the reward left running (fork bombs included).

    kill(-1) reaches every process we may signal except ourselves and pid 1 (bubblewrap's init, which
    reaps orphans); our own children we reap here, else they stay zombies and count as processes."""
    for _ in range(20):
        if sum(1 for name in os.listdir("/proc") if name.isdigit()) <= 2:
            return
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        deadline = time.monotonic() + 0.05
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.001)


def main() -> None:
    # The protocol gets private copies of stdin/stdout; user prints go to stderr instead.
    req = os.fdopen(os.dup(0), "rb", buffering=1 << 20)
    out_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    cfg = _loads(req.readline())
    h = Harness(cfg)
    batch_fd = int(cfg["batch_fd"])
    h.set_parent_death_signal()
    h.open_index()
    h.apply_limits()
    if cfg.get("drop_uid") is not None:
        h.drop_privileges()
    if cfg.get("cwd"):
        os.chdir(cfg["cwd"])
    h.start_watchdog()
    ready = h.load()
    _write(out_fd, _dumps(ready))
    if not ready.get("ready"):
        os._exit(0)
    while True:
        line = req.readline()
        if not line:
            os._exit(0)
        msg = _loads(line)
        if msg.get("op") == "batch":
            payload = _loads(os.pread(batch_fd, int(msg["len"]), int(msg["pos"])))
            h.run_batch(payload, out_fd, bool(msg["first"]), bool(msg["last"]))
        else:
            os._exit(0)


if __name__ == "__main__":
    main()
