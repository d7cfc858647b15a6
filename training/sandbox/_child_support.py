"""Helpers of the harness that runs INSIDE the sandbox process: the batch's memfd, what the reward prints
(sys.stdout / sys.stderr), and the processes it leaves behind.

Part of the harness: `isolation.harness_source()` puts this file's text after `_child_values.py`'s and before
`_child.py`'s, so it may use only the standard library.
"""
import contextlib
import io
import os
import resource
import signal
import time

if "_loads_view" not in globals():  # imported as a module rather than run as the harness
    from training.sandbox._child_values import _loads_view  # noqa: I001

__all__ = ["_BatchView", "_Capture", "_cpu_used", "_kill_strays", "_part"]


def _part(column: object, a: int, b: int) -> object:
    """Items a..b-1 of a column: a list, or itertools.repeat of one value (which map() stops with the rest)."""
    return column[a:b] if isinstance(column, list) else column


def _cpu_used() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _last_pid() -> bytes:
    """The last pid the namespace handed out (b"" if unknown): unchanged means no process or thread was made."""
    try:
        if _NS_LAST_PID[0] < 0:  # kept open: opening a sysctl file costs ~10 us, a pread ~1 us
            _NS_LAST_PID[0] = os.open("/proc/sys/kernel/ns_last_pid", os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(_NS_LAST_PID[0], 32, 0)
    except OSError:
        return b""


_NS_LAST_PID = [-1]
_CLEAN_AT = [b""]  # ns_last_pid when the namespace last held only bwrap's init and us


def _kill_strays() -> None:
    """In a private PID namespace: kill and reap what the reward left running (fork bombs included).

    kill(-1) reaches every process we may signal except ourselves and pid 1 (bubblewrap's init, which
    reaps orphans); our own children we reap here, else they stay zombies and count as processes.
    Listing /proc costs ~50 us, so it is skipped when no pid was handed out since the last clean look."""
    last = _last_pid()
    if last and last == _CLEAN_AT[0]:
        return
    for _ in range(20):
        last = _last_pid()  # read before looking: a process made while we look changes it again
        if sum(1 for name in os.listdir("/proc") if name.isdigit()) <= 2:
            _CLEAN_AT[0] = last
            return
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
        deadline = time.monotonic() + 0.05
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.001)


class _Capture(io.TextIOBase):
    """sys.stdout and sys.stderr inside the sandbox: each write goes to the harness, which keeps it with the
    sample being scored."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, harness) -> None:  # the Harness (defined after this file's text)
        super().__init__()
        self._h = harness

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._h.captured(text)
        return len(text)

    def fileno(self) -> int:
        return 2  # the real stderr (what writes to it directly is not attributed to a sample)


class _BatchView:
    """The batch memfd, mapped (again when it has grown): a piece is parsed where it lies, not copied out."""

    def __init__(self, fd: int) -> None:
        self.fd, self.mm = fd, None

    def piece(self, pos: int, n: int) -> dict:
        import mmap

        end = pos + n
        if self.mm is None or len(self.mm) < end:
            if self.mm is not None:
                self.mm.close()
            self.mm = mmap.mmap(self.fd, max(end, os.fstat(self.fd).st_size), prot=mmap.PROT_READ)
        return _loads_view(memoryview(self.mm)[pos:end])
