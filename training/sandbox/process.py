"""One sandbox process seen from the calling side: starting it, its pipes and memfds, killing it.

This side only ever parses JSON from the child, and kills it when it misbehaves.
"""
from __future__ import annotations

import collections
import contextlib
import fcntl
import mmap
import os
import queue
import selectors
import signal
import subprocess
import threading
import time
from typing import Any

from training.sandbox import isolation
from training.sandbox.types import RewardLoadError, SandboxError

try:
    import orjson

    _FAST, _ANY_KEYS = orjson.OPT_SERIALIZE_NUMPY, orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS

    def dumps(obj: object) -> bytes:
        try:  # OPT_NON_STR_KEYS costs a third more; only an extra_info with int keys (say) needs it
            return orjson.dumps(obj, default=_json_default, option=_FAST)
        except TypeError:
            return orjson.dumps(obj, default=_json_default, option=_ANY_KEYS)

    loads = orjson.loads
except ImportError:  # pragma: no cover - orjson is in requirements/base.txt
    import json

    def dumps(obj: object) -> bytes:
        return json.dumps(obj, default=_json_default).encode()

    loads = json.loads

MAX_LINE = 64 << 20  # a child that sends more in one message is killed
_STDERR_KEEP = 16 << 10
_PIPE_SIZE = 1 << 20
_KEEP_BATCH_BYTES = 16 << 20
_SIGNAL_NAMES = {signal.SIGKILL: "SIGKILL", signal.SIGXCPU: "SIGXCPU", signal.SIGSEGV: "SIGSEGV",
                 signal.SIGABRT: "SIGABRT", signal.SIGBUS: "SIGBUS", signal.SIGXFSZ: "SIGXFSZ",
                 signal.SIGTERM: "SIGTERM", signal.SIGUSR1: "SIGUSR1"}


def _json_default(obj: object) -> object:
    for attr in ("tolist", "item"):
        fn = getattr(obj, attr, None)
        if callable(fn):
            return fn()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


class _Spawner:
    """Starts every sandbox process from one long-lived thread.

    bwrap's --die-with-parent and PR_SET_PDEATHSIG fire when the *thread* that started the process
    exits, so a sandbox started from a short-lived thread (a thread pool, a request thread) would be
    killed with it. This thread lives as long as the process (a fork gets a new one)."""

    _lock = threading.Lock()
    _queue: queue.SimpleQueue | None = None
    _pid = -1

    @classmethod
    def popen(cls, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        with cls._lock:
            if cls._queue is None or cls._pid != os.getpid():
                cls._queue, cls._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=cls._serve, args=(cls._queue,), daemon=True, name="sandbox-spawner").start()
            q = cls._queue
        done: queue.SimpleQueue = queue.SimpleQueue()
        q.put((argv, kwargs, done))
        ok, value = done.get()
        if not ok:
            raise value
        return value

    @staticmethod
    def _serve(q: queue.SimpleQueue) -> None:
        while True:
            argv, kwargs, done = q.get()
            try:
                done.put((True, subprocess.Popen(argv, **kwargs)))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                done.put((False, exc))


class ChildDied(Exception):
    """The child stopped answering: it exited, was killed, or was killed by us."""

    def __init__(self, reason: str, running: tuple[int, int] | None, fatal_for_batch: bool = False,
                 timed_out: bool = False, garbled: bool = False, tampered: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.running = running  # [lo, hi): the samples it was on, from the shared memfd (None if unknown)
        self.fatal_for_batch = fatal_for_batch  # the batch's budget is spent: no later sample is run
        self.timed_out = timed_out  # we killed it for taking too long (wall clock)
        self.garbled = garbled  # it wrote bytes that are not a message (only the reward would)
        self.tampered = tampered  # it sent a result it was not asked for: nothing more of the batch is trusted


class SandboxProcess:
    """One sandbox process, its pipes and its two memfds (the batch, and the index being scored)."""

    def __init__(self, launch: isolation.Launch, cfg: dict[str, Any], load_timeout: float) -> None:
        self.launch = launch
        self.stderr_tail: collections.deque[bytes] = collections.deque()
        self._stderr_len = 0
        self.buf = bytearray()
        self.cpu_used = 0.0
        self.next_seq = 2  # the memfd's seq for the first sample of the next run (1: loading; see _child.py)
        # [first seq of the running group, its end, the last call the watchdog timed out]
        self.index_fd = os.memfd_create("sandbox-index", os.MFD_CLOEXEC)
        os.ftruncate(self.index_fd, 24)
        self.index_map = mmap.mmap(self.index_fd, 24)
        self.index = memoryview(self.index_map).cast("q")
        self.index[0] = self.index[1] = self.index[2] = -1
        # batches travel through a memfd: one pwrite, instead of a pipe whose reader wakes per page
        self.batch_fd = os.memfd_create("sandbox-batch", os.MFD_CLOEXEC)  # pass_fds opens both to the child
        self.batch_size = 0
        try:
            self.proc = _Spawner.popen(
                launch.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=launch.env, cwd=launch.cwd or "/", pass_fds=(self.index_fd, self.batch_fd), start_new_session=True,
                close_fds=True)
        except OSError as exc:
            self._close_index()
            raise SandboxError(f"could not start the sandbox: {exc}") from exc
        threading.Thread(target=self._drain_stderr, daemon=True, name="sandbox-stderr").start()
        self.out_fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        self.in_fd = self.proc.stdin.fileno()  # type: ignore[union-attr]
        for fd in (self.in_fd, self.out_fd):  # a batch is ~0.4 MB: a 64 KB pipe makes it ping-pong
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        os.set_blocking(self.out_fd, False)
        os.set_blocking(self.in_fd, False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.out_fd, selectors.EVENT_READ)
        self.wsel = selectors.DefaultSelector()
        self.wsel.register(self.in_fd, selectors.EVENT_WRITE)
        self.nproc_base = launch.nproc_base()  # the uid's tasks elsewhere when it started: RLIMIT_NPROC adds them
        cfg = {**cfg, "nproc_base": self.nproc_base, "index_fd": self.index_fd, "batch_fd": self.batch_fd,
               "drop_uid": launch.drop_uid, "private_tmp": launch.private_tmp,
               "pidns": launch.pidns, "cwd": launch.cwd}
        try:
            self.send(dumps(cfg) + b"\n", time.monotonic() + load_timeout)
            ready = self.read_message(time.monotonic() + load_timeout + 5.0)
        except ChildDied as exc:
            self.dispose()
            raise RewardLoadError(f"the sandbox failed while loading the reward: {exc.reason}",
                                  traceback=self.stderr_text() or None, stderr=self.stderr_text()) from None
        except TimeoutError:
            self.dispose()
            raise RewardLoadError(f"loading the reward took longer than {load_timeout:g} s (load_time_limit_s)",
                                  stderr=self.stderr_text()) from None
        if not ready.get("ready"):
            self.dispose()
            raise RewardLoadError(str(ready.get("load_error") or "the reward could not be loaded"),
                                  lineno=ready.get("lineno"), traceback=ready.get("traceback"),
                                  stderr=self.stderr_text())
        self.uid = ready.get("uid")
        log = ready.get("log")
        self.load_log = log[:_STDERR_KEEP] if isinstance(log, str) else ""  # printed while the reward loaded

    # ---- I/O -----------------------------------------------------------------------------------
    def _drain_stderr(self) -> None:
        """Keep the last 16 KB of the child's stderr (user prints and tracebacks) for error reports."""
        stream = self.proc.stderr
        fd = stream.fileno()  # type: ignore[union-attr]
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                stream.close()  # type: ignore[union-attr]
                return
            self.stderr_tail.append(chunk)
            self._stderr_len += len(chunk)
            while self._stderr_len > _STDERR_KEEP and len(self.stderr_tail) > 1:
                self._stderr_len -= len(self.stderr_tail.popleft())

    def stderr_text(self) -> str:
        return b"".join(self.stderr_tail).decode(errors="replace")[-_STDERR_KEEP:]

    def send(self, data: bytes, deadline: float) -> None:
        """Write all of `data` (small control messages; the child reads each whole before computing)."""
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.in_fd, view):]
                continue
            except BlockingIOError:
                pass
            except OSError:  # EPIPE: it is gone
                raise self.death() from None
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise ChildDied("the sandbox stopped reading its input", None)
            if not self.wsel.select(min(left, 1.0)) and self.proc.poll() is not None:
                raise self.death()

    def send_piece(self, payload: bytes, pos: int, first: bool, last: bool, deadline: float) -> None:
        """Put one piece of a batch at `pos` in the batch memfd and tell the child where it is."""
        os.pwrite(self.batch_fd, payload, pos)
        end = pos + len(payload)
        self.batch_size = max(self.batch_size, end)
        if last and self.batch_size > max(4 * end, _KEEP_BATCH_BYTES):  # free what a much bigger batch used
            os.ftruncate(self.batch_fd, end)  # (not every time: pages freed are pages to fault in again)
            self.batch_size = end
        self.send(b'{"op":"batch","pos":%d,"len":%d,"first":%s,"last":%s}\n'
                  % (pos, len(payload), b"true" if first else b"false", b"true" if last else b"false"), deadline)

    def read_message(self, deadline: float) -> dict[str, Any]:
        """Return the next JSON line from the child; raise ChildDied on EOF, garbage or the deadline."""
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                try:
                    msg = loads(line)
                except ValueError:
                    self.kill()
                    raise ChildDied("the sandbox sent a malformed message", None, garbled=True) from None
                if not isinstance(msg, dict):
                    self.kill()
                    raise ChildDied("the sandbox sent a malformed message", None, garbled=True)
                return msg
            if len(self.buf) > MAX_LINE:
                self.kill()
                raise ChildDied(f"the sandbox sent more than {MAX_LINE >> 20} MB in one message", None)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not self.sel.select(left):
                continue
            try:
                chunk = os.read(self.out_fd, 1 << 16)  # small: a 1 MB read buffer costs an mmap a call
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                raise self.death()
            self.buf += chunk

    # ---- lifecycle -------------------------------------------------------------------------------
    def running(self, seq0: int, offset: int, stop: int) -> tuple[int, int] | None:
        """[lo, hi): the samples of the group this child is running, from the shared memfd (None: idle or
        unknown). One of them was running; hi - lo == 1 names it."""
        try:
            lo_seq, hi_seq = int(self.index[0]), int(self.index[1])
        except (ValueError, TypeError):
            return None
        lo, hi = offset + lo_seq - seq0, min(stop, offset + hi_seq - seq0)
        return (lo, hi) if lo_seq >= seq0 and offset <= lo < hi else None

    def timed_out_call(self, seq0: int, offset: int, stop: int) -> int | None:
        """The last sample the watchdog signalled for running past its time limit (None: none in range)."""
        try:
            index = offset + int(self.index[2]) - seq0
        except (ValueError, TypeError):
            return None
        return index if int(self.index[2]) >= seq0 and offset <= index < stop else None

    def death(self) -> ChildDied:
        """Why it stopped (it has closed its pipes): wait for it and read its exit status."""
        try:
            rc = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.kill()
            return ChildDied("the sandbox closed its output and was killed", None)
        # bwrap reports a child killed by signal N as 128 + N; a direct child as -N
        sig = -rc if rc < 0 else (rc - 128 if self.launch.mode == "bubblewrap" and rc > 128 else None)
        if sig == signal.SIGXCPU:  # RLIMIT_CPU is per batch: the rest of the batch is not scored
            return ChildDied("the batch's CPU time limit was exceeded (batch_time_limit_s)", None,
                             fatal_for_batch=True)
        if sig == signal.SIGKILL:
            return ChildDied("the sandbox process was killed (SIGKILL: out of memory, or the reward killed it)", None)
        if sig is not None:
            return ChildDied(f"the sandbox process died of signal {_SIGNAL_NAMES.get(sig, sig)}", None)
        return ChildDied(f"the sandbox process exited with code {rc} (did the reward call os._exit?)", None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):  # the whole session: bwrap, or the harness and anything it forked
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL does not fail
            self.proc.wait(timeout=5.0)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        self.sel.close()
        self.wsel.close()

    def dispose(self) -> None:
        """Kill it and free the shared memfd (call after the last `running()`)."""
        self.kill()
        self._close_index()

    def _close_index(self) -> None:
        try:
            self.index.release()
            self.index_map.close()
        except (BufferError, ValueError):
            pass
        for fd in (self.index_fd, self.batch_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


