"""The harness that runs INSIDE the sandbox process; it is the only code that touches user code.

It is started as `python -s -P -c <_child_values.py's text + _child_support.py's + this file's>` (see
`isolation.harness_source`: the project dir is hidden in the sandbox, so neither can be imported), and
must therefore only use the standard library (orjson when installed).

The protocol and how calls are grouped are described in `protocol.py`.
"""
import contextlib
import functools
import itertools
import math
import os
import resource
import signal
import sys
import threading
import time

if "_dumps" not in globals():  # imported as a module rather than run as the harness
    from training.sandbox._child_values import (  # noqa: I001
        _ARGS, _BadReturn, _Timeout, _binds_positionally, _chunk_message, _clip_extra, _dumps, _finite_floats, _loads,
        _short, _tb_text, _to_score, _user_lineno, _write)
    from training.sandbox._child_support import _BatchView, _Capture, _cpu_used, _kill_strays, _part  # noqa: I001

_FLUSH_EVERY = 2048  # results sent at least this often; also every 20 ms, and when the batch ends
_FLUSH_AFTER_S = 0.02
_SLOW_S = 2e-5  # calls this long run (and are timed) one at a time; faster ones run in groups
_GROUP_MAX = 256  # calls in one map(): bigger saves little, and a crash in it needs a replay to place


# Read by the SIGUSR1 handler: only raise the timeout while user code runs, never in the harness.
_IN_USER = False
_FORKED = False  # set in a child forked by user code: it must never reach the result pipe
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
        self.max_extra = int(self.limits.get("max_extra_chars") or 4096)
        self.limit_now = float(self.limits["load_time_limit_s"])  # what the watchdog enforces right now
        self.main_tid = threading.get_ident()
        self.loop = None
        self.fn = None
        self.idx = memoryview(bytearray(24)).cast("q")  # replaced by the shared memfd when there is one
        self.idx[0] = self.idx[2] = -1
        self.cur: tuple = (-1, ())  # (seq of the group's first call, its results so far): see current()
        self.fired = -1
        self.group = 1  # calls in the next group (adapts to how long calls take)
        self.pidns = bool(cfg.get("pidns"))
        self.out_fd = -1
        # the open chunk, shared with the flush handler: [scores, runs, special, i0, sent, runs sent]
        self.chunk: list | None = None
        # What the reward prints while a sample is scored: {sample index: [chars, [pieces]]}, sent with the
        # sample's result; capped per sample and per batch. Printed while loading: load_log.
        self.logs: dict = {}
        self.log_base = 0  # a running call's index is its seq - log_base
        self.log_cap = int(self.limits.get("max_log_chars", 2000))
        self.batch_log_cap = int(self.limits.get("max_batch_log_chars", 65536))
        self.batch_logged = 0
        self.load_log: list = [0, []]

    # ---- what the reward prints ----------------------------------------------------------------
    def captured(self, text: str) -> None:
        """sys.stdout / sys.stderr write `text`: keep it with the sample being scored (or the loading)."""
        seq = self.current()
        if _FORKED or seq < 0:  # between calls (a thread of the reward, say): the stderr tail, as before
            with contextlib.suppress(OSError):
                os.write(2, text.encode("utf-8", "replace"))
            return
        if seq == LOAD_SEQ:
            self._keep(self.load_log, text, self.log_cap)
            return
        index = seq - self.log_base
        entry = self.logs.get(index)
        if entry is None:
            if not self.log_cap:
                return
            if self.batch_logged >= self.batch_log_cap:  # the batch's budget is spent: a note, nothing more
                self.logs[index] = [self.log_cap, ["[output not kept: the batch printed max_batch_log_chars]"]]
                return
            entry = self.logs[index] = [0, []]
        before = entry[0]
        self._keep(entry, text, min(self.log_cap, before + self.batch_log_cap - self.batch_logged))
        self.batch_logged += entry[0] - before

    @staticmethod
    def _keep(entry: list, text: str, cap: int) -> None:
        room = cap - entry[0]
        if room <= 0:
            return
        if len(text) > room:
            text = text[:room] + "… [output cut]"
            entry[0] = cap
        else:
            entry[0] += len(text)
        entry[1].append(text)

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

        mm = mmap.mmap(int(fd), 24)
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
        self.idx[1] = LOAD_SEQ + 1
        self.idx[0] = LOAD_SEQ
        self.cur = (LOAD_SEQ, ())
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
            self.cur = (-1, ())
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
        self.positional = _binds_positionally(fn)
        return {"ready": True, "uid": os.getuid(), "pid": os.getpid(), "log": "".join(self.load_log[1])}

    # ---- watchdog ----------------------------------------------------------------------------
    def start_watchdog(self) -> None:
        signal.signal(signal.SIGUSR1, self._on_timeout_signal)
        signal.signal(signal.SIGUSR2, self._on_flush_signal)
        signal.signal(signal.SIGXCPU, self._on_cpu_limit)
        os.register_at_fork(after_in_child=_mark_forked)
        threading.Thread(target=self._watchdog, args=(0.01,), daemon=True, name="sandbox-watchdog").start()

    def _on_cpu_limit(self, signum: int, frame: object) -> None:
        """RLIMIT_CPU's soft limit: the batch's CPU budget is spent. Name the call that was running (in a
        group of calls the memfd alone could not), then die of the signal, as the parent expects."""
        cur = self.current()
        if not _FORKED and cur >= 0:
            self.idx[0] = cur  # the start first: narrowing
            self.idx[1] = cur + 1
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGXCPU)

    def current(self) -> int:
        """The seq of the call running now (-1: idle); the watchdog and the signal handlers read it."""
        seq, out = self.cur  # one tuple, swapped whole: a thread never sees half of an update
        return seq + len(out)  # map() appends each result as its call returns

    def _on_timeout_signal(self, signum: int, frame: object) -> None:
        if _IN_USER and not _FORKED and self.current() == self.fired:
            raise _Timeout()

    def _on_flush_signal(self, signum: int, frame: object) -> None:
        """A call is taking long: send the results of the groups finished before it (main thread)."""
        st = self.chunk
        if not _IN_USER or _FORKED or st is None:  # the lists are only stable while user code runs
            return
        k, r = len(st[0]), len(st[1])
        if k > st[4]:
            _write(self.out_fd, _chunk_message(st, st[4], k, st[5], r, self.logs))
            st[4], st[5] = k, r

    def _watchdog(self, tick: float) -> None:
        """Watch the running call: one running too long gets SIGUSR1 (timeout); one running for a while
        with finished results not yet sent gets SIGUSR2 (flush), so results stream as they come."""
        seen, since, last_fire, flushed = -1, 0.0, 0.0, -1
        while True:
            time.sleep(tick)
            cur, now = self.current(), time.monotonic()
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
                self.idx[2] = cur  # this call has run past its limit: the parent may blame it if it must kill
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

    def _caller(self, kwargs: dict | None):
        """fn as map() can call it with (data_source, solution_str, ground_truth, extra_info)."""
        fn = self.fn
        if kwargs:  # as VERL's partial(compute_score, **reward_kwargs): the call's own arguments win
            kwargs = {k: v for k, v in kwargs.items() if k not in _ARGS} or None
        if self.positional:
            return functools.partial(fn, **kwargs) if kwargs else fn
        if kwargs:
            return lambda d, s, g, e: fn(data_source=d, solution_str=s, ground_truth=g, extra_info=e, **kwargs)
        return lambda d, s, g, e: fn(data_source=d, solution_str=s, ground_truth=g, extra_info=e)

    def run_batch(self, msg: dict, out_fd: int, first: bool = True, last: bool = True) -> None:
        """Score one piece of a batch, group by group, sending results in chunks (the sandbox's hot loop)."""
        global _IN_USER
        offset, seq0 = int(msg["offset"]), int(msg["seq0"])
        self.log_base = seq0 - offset
        if first:
            self.batch_logged = 0
        sol, gt = msg["sol"], msg["gt"]
        n = len(sol)
        ds = msg["ds"]
        ds = itertools.repeat(ds) if isinstance(ds, str) else ds  # one data_source for all: sent once
        ex = msg["ex"] if msg["ex"] is not None else itertools.repeat(None)  # endless: map() stops with sol
        call, exact = self._caller(msg.get("kwargs") or None), bool(msg.get("exact"))
        if first:  # RLIMIT_CPU: batch_time_limit_s more CPU seconds for this batch (all its pieces)
            hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
            soft = int(math.ceil(_cpu_used() + float(self.limits["batch_time_limit_s"])))
            resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        idx, perf, group_max = self.idx, time.perf_counter, 1 if exact else _GROUP_MAX
        self.out_fd = out_fd
        if first or self.chunk is None:  # the open chunk runs on across the batch's pieces: fewer messages
            self.chunk, self.flush_at = [[], [], {}, offset, 0, 0], perf() + _FLUSH_AFTER_S
        st, flush_at = self.chunk, self.flush_at
        size, pos = min(self.group, group_max), 0
        while pos < n:
            end = min(n, pos + size)
            out: list = []
            idx[1] = seq0 + end  # the end first: a reader in between sees a range that holds the call
            idx[0] = seq = seq0 + pos
            self.cur = (seq, out)
            t0 = perf()
            try:
                _IN_USER = True
                if pos == 0 and end == n:  # the whole piece in one group (the usual case): no slices
                    out.extend(map(call, ds, sol, gt, ex))
                else:
                    out.extend(map(call, _part(ds, pos, end), sol[pos:end], gt[pos:end], _part(ex, pos, end)))
                _IN_USER = False
                failed = -1
            except BaseException as exc:  # noqa: BLE001 - the call that raised fails alone; the group goes on
                _IN_USER = False
                if _FORKED:
                    os._exit(70)
                failed = len(out)
                if pos + failed < end:
                    st[2][len(st[0]) + failed] = ("e", self._error(exc))
                    out.append(None)
                else:  # a timeout signal that came after the last call had returned
                    failed = -1
            if _FORKED:  # a fork of the harness must never reach the result pipe
                os._exit(0)
            if failed >= 0 or self.fired >= seq or not _finite_floats(out):
                self._check_group(out, seq, failed, st)
            t1 = perf()
            count = len(out)
            st[0].extend(out)
            st[1].append([count, t1 - t0])
            pos += count
            size = 1 if (t1 - t0) >= _SLOW_S * count else min(group_max, size * 2)
            if t1 >= flush_at or len(st[0]) >= _FLUSH_EVERY:
                _write(out_fd, _chunk_message(st, st[4], len(st[0]), st[5], len(st[1]), self.logs))
                st = self.chunk = [[], [], {}, st[3] + len(st[0]), 0, 0]
                flush_at = t1 + _FLUSH_AFTER_S
        self.group, self.flush_at = size, flush_at
        self.cur = (-1, ())
        idx[0] = -1
        if not last:  # each message wakes the parent (costly in a VM): the next piece's results go with it
            return
        self.chunk = None
        if self.pidns:
            _kill_strays()
        last_chunk = _chunk_message(st, st[4], len(st[0]), st[5], len(st[1]), self.logs)
        self.logs.clear()  # a sample's output after its result went (a thread of the reward): not kept
        _write(out_fd, last_chunk[:-1] + b',"end":true,"cpu":' + repr(_cpu_used()).encode() + b"}")

    def _check_group(self, out: list, seq: int, failed: int, st: list) -> None:
        """The slow path of a group: turn each return that is not a finite float into a score, or an error."""
        global _IN_USER
        base, special, idx = len(st[0]), st[2], self.idx
        fired, self.fired = self.fired - seq, -1
        for j, value in enumerate(out):
            if j == failed:
                continue
            if j == fired:  # it caught the watchdog's timeout and returned late
                special[base + j] = ("e", [f"timed out after {self.time_limit:g} s (time_limit_s)", None, None])
                out[j] = None
                continue
            if value.__class__ is float and value - value == 0.0:
                continue
            idx[0] = seq + j  # the start first: narrowing, the range still holds the call
            idx[1] = seq + j + 1
            self.cur = (seq + j, ())
            try:
                _IN_USER = True  # awaiting a coroutine or converting a value runs user code
                value = self._normalise(value)
                _IN_USER = False
            except BaseException as exc:  # noqa: BLE001 - reported for this sample only
                _IN_USER = False
                if _FORKED:
                    os._exit(70)
                special[base + j] = ("e", self._error(exc))
                value = None
            if _FORKED:
                os._exit(0)
            if value.__class__ is tuple:
                special[base + j] = ("x", value[1])
                value = value[0]
            out[j] = value
            idx[1] = seq + j + 2  # forward again: the end first

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
                size = len(_dumps(extra))
            except Exception as exc:  # noqa: BLE001 - fail this sample, not the chunk
                raise _BadReturn(_short(f"returned extra values that cannot be sent: {exc}")) from None
            if size > self.max_extra:
                extra = _clip_extra(extra, self.max_extra)
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


def main() -> None:
    # The protocol gets private copies of stdin/stdout; user prints go to stderr instead.
    req = os.fdopen(os.dup(0), "rb", buffering=1 << 20)
    out_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    cfg = _loads(req.readline())
    h = Harness(cfg)
    sys.stdout = sys.stderr = _Capture(h)  # print() and logging: kept with the sample (fd-level writes: stderr)
    batches = _BatchView(int(cfg["batch_fd"]))
    h.set_parent_death_signal()
    h.open_index()
    # The harness's own thread first: RLIMIT_NPROC counts the sandbox uid's tasks host-wide, and other sandboxes'
    # tasks that appear after this one counted them must never keep the harness from starting.
    h.start_watchdog()
    h.apply_limits()
    if cfg.get("drop_uid") is not None:
        h.drop_privileges()
    if os.getuid() == 0 or os.geteuid() == 0:  # never load reward code as root, whatever the parent planned
        _write(out_fd, _dumps({"load_error": "refused: the sandbox would run the reward as root", "traceback": None,
                               "lineno": None}))
        os._exit(0)
    if cfg.get("cwd"):
        os.chdir(cfg["cwd"])
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
            payload = batches.piece(int(msg["pos"]), int(msg["len"]))
            h.run_batch(payload, out_fd, bool(msg["first"]), bool(msg["last"]))
        else:
            os._exit(0)


if __name__ == "__main__":
    main()
