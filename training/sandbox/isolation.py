"""How the sandbox process is started: bubblewrap when it works here; otherwise nothing runs (fail closed).

Without a working bubblewrap (not installed, user namespaces refused: many containers) reward code is
refused with SandboxUnavailable, which says why and how to fix it. Only an operator who sets
REWARD_SANDBOX_ALLOW_UNISOLATED=reward-code-can-read-app-data gets the rlimits mode: resource limits, no
network and a cleaned environment, but the host's files readable with the sandbox's uid. Reward code never
runs as root in either mode: root drops to uid 65534 before it loads, or it is refused.

bubblewrap mode: no network (own network/IPC/UTS/PID namespaces); an empty root into which only the
system folders (SYSTEM_DIRS), the interpreter's prefix and the venv are bound read-only, so the app's
data folders (runs, models, uploads, var/) are absent wherever they live; private size-capped tmpfs
/tmp and /dev/shm as the only writable places; the caller's hidden paths that lie inside a bound folder masked by
empty read-only tmpfs; a cleaned environment, uid 65534 without capabilities, --die-with-parent,
--new-session.

Why two variants of bwrap: run by root, `bwrap --unshare-user --uid 65534` maps 65534 to the real
uid 0, and the kernel never enforces RLIMIT_NPROC for uid 0, so a fork bomb is not contained (checked
here: 200 forks of 200 under RLIMIT_NPROC=20). So as root we use no user namespace; the harness keeps
only CAP_SETUID/CAP_SETGID and drops to the real uid 65534 after the mounts are set up and before any
user code runs (then 19 forks of 20). Unprivileged callers (CI) get a user namespace, where the
kernel counts processes per namespace and RLIMIT_NPROC holds.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from training.sandbox.types import SandboxLimits, SandboxUnavailable

SANDBOX_UID = 65534
REPO_ROOT = Path(__file__).resolve().parents[2]
# Masked in every sandbox (when they exist): homes, sockets (/run holds Redis/Postgres unix sockets,
# which a network namespace does not cut), logs, and this project's checkout (settings, .env, db).
DEFAULT_HIDDEN = ("/root", "/home", "/run", "/var/run", "/var/tmp", "/var/log", "/var/mail", "/srv", "/mnt",
                  "/media", str(REPO_ROOT))
CLEAN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "USER": "nobody",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    # fewer threads: each one counts against max_procs
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
MODES = ("bubblewrap", "rlimits")
# The only way to run reward code without isolation: the variable set to exactly this value.
ALLOW_UNISOLATED = "REWARD_SANDBOX_ALLOW_UNISOLATED"
UNISOLATED_CONSENT = "reward-code-can-read-app-data"
FIX = ("To fix it: install bubblewrap (apt-get install bubblewrap) and let it create user namespaces "
       "(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; in Docker the sandbox "
       "settings of docker-compose.yml's worker services); `python -m training.sandbox` checks it. To run reward "
       f"code without isolation anyway, where it can read this host's files, an operator sets {ALLOW_UNISOLATED}="
       f"{UNISOLATED_CONSENT}.")
PROBE_RETRY_S = 60.0  # a failed probe is tried again after this long (a success is kept)
# What a bubblewrap sandbox sees of the host besides the interpreter and the venv (all read-only).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")


@dataclass
class Launch:
    """Everything needed to start one sandbox process."""

    mode: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    drop_uid: int | None  # the harness setuid()s to this before loading user code
    private_tmp: str | None  # chmod 1777 by the harness before dropping root
    pidns: bool
    details: list[str] = field(default_factory=list)
    nproc_uid: int | None = None  # RLIMIT_NPROC counts this uid's tasks host-wide: add those that exist

    def nproc_base(self) -> int:
        """Tasks (threads included) the sandbox's uid already has; max_procs comes on top of them."""
        return 0 if self.nproc_uid is None else count_tasks(self.nproc_uid)


def count_tasks(uid: int) -> int:
    """Threads of all processes whose real uid is `uid` (what RLIMIT_NPROC counts)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(b":", 1) for line in status.splitlines() if b":" in line)
        if int(fields.get(b"Uid", b"-1").split()[0]) == uid:
            total += int(fields.get(b"Threads", b"1").strip() or 1)
    return total


def harness_source() -> str:
    """The sandbox's program: the result helpers, the harness's helpers, then the harness (all stdlib-only)."""
    here = Path(__file__).parent
    return "\n\n".join((here / name).read_text() for name in ("_child_values.py", "_child_support.py", "_child.py"))


def python_argv() -> list[str]:
    # -s: no user site; -P: no script dir on sys.path. Not -I: it would drop PYTHONHASHSEED.
    return [sys.executable, "-s", "-P", "-c", harness_source()]


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def interpreter_roots() -> set[str]:
    """The interpreter's prefixes and the venv, as given and with links resolved."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                str(Path(_real(sys.executable)).parent.parent)}
    return {_real(p) for p in prefixes} | {os.path.abspath(p) for p in prefixes}


def visible_paths(hidden: list[str]) -> list[str]:
    """The interpreter's prefix, the venv and other import roots, which must stay readable."""
    out = interpreter_roots()
    cwd = _real(os.getcwd())
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        real = _real(entry)
        if any(_inside(real, p) for p in out):
            continue
        # editable installs and the like, but never the app itself or anything hidden
        if real == cwd or _inside(real, str(REPO_ROOT)) or any(_inside(real, h) for h in hidden):
            continue
        out.add(real)
    return sorted(p for p in out if os.path.exists(p) and p != "/")


def hidden_paths(extra: list[str | os.PathLike[str]] | tuple = ()) -> list[str]:
    paths = list(DEFAULT_HIDDEN)
    home = os.environ.get("HOME")
    if home and _real(home) != "/":
        paths.append(home)
    paths += [os.fspath(p) for p in extra]
    out: list[str] = []
    for p in paths:
        real = _real(p)
        if real != "/" and real not in out and (os.path.lexists(p) or os.path.exists(real)):
            out.append(real)
    return out


def _empty_file() -> str:
    """An empty read-only file to bind over hidden files (bwrap binds are nodev: /dev/null would fail)."""
    path = os.path.join(tempfile.gettempdir(), f"reward-sandbox-empty-{os.getuid()}")
    try:
        st = os.lstat(path)
        if st.st_size == 0 and st.st_uid == os.getuid() and os.path.isfile(path) and not os.path.islink(path):
            return path
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    os.close(fd)
    return path


def outermost_hidden(hidden: list[str], visible: list[str]) -> list[str]:
    """Drop each hidden path that an outer hidden one already masks (bwrap cannot remount a mount inside
    an already read-only tmpfs), unless a re-bound visible path lies between them and exposes it again."""
    def covered(h: str) -> bool:
        return any(o != h and _inside(h, o) and not any(_inside(h, v) and _inside(v, o) for v in visible)
                   for o in hidden)

    return [h for h in dict.fromkeys(hidden) if not covered(h)]


def _bwrap_argv(limits: SandboxLimits, hidden: list[str], as_root: bool) -> list[str]:
    # An allow-list: an empty root with the system folders, the interpreter and the venv bound in read-only.
    # Whatever else the host has (the app's data folders wherever they live: runs, models, uploads, var/)
    # does not exist in the sandbox.
    argv = [shutil.which("bwrap") or "bwrap"]  # the one the probe ran (the sandbox's PATH is not ours)
    for d in SYSTEM_DIRS:
        if os.path.islink(d):  # merged /usr: /bin -> usr/bin
            argv.extend(["--symlink", os.readlink(d), d])
        elif os.path.isdir(d):
            argv.extend(["--ro-bind", d, d])
    # /dev/shm: a private tmpfs too (the IPC namespace is private), for multiprocessing's semaphores:
    # VERL's own scorers (prime_math) time sympy out in a child process through a multiprocessing.Queue
    argv += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--size", str(limits.tmp_mb << 20),
             "--tmpfs", "/tmp", "--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/dev/shm"]
    bound = [os.path.realpath(d) for d in SYSTEM_DIRS if os.path.isdir(d)]
    # The interpreter and the venv are bound even when they live under /tmp (a checkout there): binds
    # after --tmpfs /tmp land on top of the private /tmp. Other import roots under /tmp (a script's
    # folder on sys.path) stay behind it.
    roots = interpreter_roots()
    visible = [v for v in visible_paths(hidden)
               if not any(_inside(v, b) for b in [*bound, "/dev", "/proc"])
               and (not _inside(v, "/tmp") or v in roots)]
    hidden = outermost_hidden(hidden, visible)
    made: set[str] = {"/tmp"}
    for v in visible:
        if any(_inside(v, o) and o != v for o in visible):
            continue  # inside another re-bound path
        # bwrap would create the missing parents with mode 0700, which uid 65534 cannot traverse
        for parent in reversed(Path(v).parents):
            p = str(parent)
            if p != "/" and p not in made and not any(_inside(p, b) for b in bound):
                argv.extend(["--perms", "0755", "--dir", p])
                made.add(p)
        argv.extend(["--ro-bind", v, v])
    masked_dirs: list[str] = []
    for h in hidden:  # only what lies inside a bound folder needs masking (e.g. a secrets dir in /etc)
        if not any(_inside(h, b) for b in bound + visible):
            continue
        if os.path.isdir(h):
            argv.extend(["--size", "65536", "--tmpfs", h])
            masked_dirs.append(h)
        elif os.path.exists(h):
            argv.extend(["--ro-bind", _empty_file(), h])
    for d in masked_dirs:
        argv.extend(["--remount-ro", d])
    argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--chdir", "/tmp"]
    if as_root:
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
                 "--cap-drop", "ALL"]
    return argv + ["--"]


def _bwrap_details(limits: SandboxLimits, hidden: list[str], as_root: bool) -> list[str]:
    return [
        "bubblewrap: own network, IPC, UTS and PID namespaces (no network at all)",
        "an empty root: only " + ", ".join(d for d in SYSTEM_DIRS if os.path.exists(d)) + ", the interpreter "
        "and the venv are there, read-only (no app data: runs, models, uploads, the database)",
        f"private /tmp and /dev/shm (tmpfs, {limits.tmp_mb} MB each) are the only writable places",
        "hidden: " + ", ".join(hidden),
        f"runs as uid {SANDBOX_UID} with no capabilities and no_new_privs"
        + (" (root drops privileges inside the sandbox, after the mounts)" if as_root else
           " (user namespace; nested user namespaces disabled)"),
        "cleaned environment: " + ", ".join(sorted(CLEAN_ENV)),
        _limits_line(limits, nproc_enforced=True) + (f" (on top of the tasks uid {SANDBOX_UID} already has)"
                                                     if as_root else " (counted in its own user namespace)"),
        "killed with its parent (--die-with-parent); its own session and process group",
    ]


def _limits_line(limits: SandboxLimits, nproc_enforced: bool = True) -> str:
    nproc = f"{limits.max_procs} processes/threads" + ("" if nproc_enforced else " (NOT enforced)")
    return (f"rlimits: memory {limits.memory_mb} MB (RLIMIT_AS), CPU {limits.batch_time_limit_s:g} s per batch, "
            f"files {limits.max_file_mb} MB, {nproc}; {limits.time_limit_s:g} s per call")


_probed: dict[bool, tuple[str | None, float]] = {}


def _probe_bwrap(as_root: bool) -> str | None:
    """None when our bwrap recipe runs the interpreter here (bwrap is really run, once), else why not.

    A success is kept for the life of the process; a failure for PROBE_RETRY_S (then it is tried again)."""
    known = _probed.get(as_root)
    if known is not None and (known[0] is None or time.monotonic() - known[1] < PROBE_RETRY_S):
        return known[0]
    why_not = _run_bwrap_probe(as_root)
    _probed[as_root] = (why_not, time.monotonic())
    return why_not


def forget_probe() -> None:
    """Probe again on next use (tests; after an operator fixed the host, a new worker process does it)."""
    _probed.clear()


def _run_bwrap_probe(as_root: bool) -> str | None:
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    limits = SandboxLimits()
    argv = _bwrap_argv(limits, hidden_paths(), as_root) + [sys.executable, "-s", "-P", "-c", "import os"]
    try:
        res = subprocess.run(argv, env=dict(CLEAN_ENV), capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to start: {exc}"
    if res.returncode != 0:
        return "bwrap does not work here: " + (res.stderr.decode(errors="replace").strip()[:300]
                                               or f"exit status {res.returncode}")
    return None


def unisolated_allowed() -> bool:
    """Whether an operator opted in to running reward code without isolation (the exact value only)."""
    return os.environ.get(ALLOW_UNISOLATED, "") == UNISOLATED_CONSENT


def _refuse(reason: str) -> SandboxUnavailable:
    value = os.environ.get(ALLOW_UNISOLATED, "")
    if value and value != UNISOLATED_CONSENT:
        reason += f"; {ALLOW_UNISOLATED} is set to {value[:40]!r}, but only {UNISOLATED_CONSENT!r} opts in"
    return SandboxUnavailable(reason, FIX)


@functools.lru_cache(maxsize=1)
def _unshare_net_prefix() -> tuple[str, ...]:
    """`unshare -n` (root) or `unshare -r -n` (user namespace), whichever works here, else nothing."""
    if shutil.which("unshare") is None:
        return ()
    for prefix in (("unshare", "-n", "--"), ("unshare", "-r", "-n", "--")):
        try:
            res = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if res.returncode == 0:
            return prefix
    return ()


def _others_can_reach(path: str) -> bool:
    """True when every directory above `path` is searchable by 'other' (so uid 65534 can import from it)."""
    p = Path(path)
    for d in [p, *p.parents]:
        try:
            if not os.stat(d).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def plan(limits: SandboxLimits, extra_hidden: list | tuple = (), mode: str = "auto",
         private_dir: str | None = None) -> Launch:
    """Decide how to start a sandbox process; `mode` is "auto", "bubblewrap" or "rlimits".

    Raises SandboxUnavailable when bubblewrap does not work here and no operator opted in to the rlimits
    mode (whatever `mode` asks for), or when the rlimits mode would run the reward as root."""
    if mode not in ("auto", *MODES):
        raise ValueError(f"isolation must be 'auto', 'bubblewrap' or 'rlimits', not {mode!r}")
    as_root = os.geteuid() == 0
    hidden = hidden_paths(list(extra_hidden))
    why_not = None
    if mode in ("auto", "bubblewrap"):
        why_not = _probe_bwrap(as_root)
        if why_not is None:
            # a user namespace counts its own processes; the real uid 65534 (as root) counts host-wide
            return Launch("bubblewrap", _bwrap_argv(limits, hidden, as_root) + python_argv(), dict(CLEAN_ENV),
                          None, SANDBOX_UID if as_root else None, "/tmp" if as_root else None, True,
                          _bwrap_details(limits, hidden, as_root), SANDBOX_UID if as_root else None)
        if mode == "bubblewrap":
            raise _refuse(f"isolation='bubblewrap' was requested but {why_not}")
    if not unisolated_allowed():
        raise _refuse(why_not or "the rlimits mode isolates nothing and was not allowed")
    drop = as_root and all(_others_can_reach(p) for p in visible_paths(hidden))
    if as_root and not drop:  # never root: uid 65534 must reach the interpreter, or nothing runs
        raise SandboxUnavailable(
            f"the app runs as root and uid {SANDBOX_UID} cannot reach the interpreter or the venv "
            f"({', '.join(p for p in visible_paths(hidden) if not _others_can_reach(p))[:300]}), so the "
            "unisolated mode would run reward code as root", "To fix it: make bubblewrap work (see the README's "
            f"reward sandbox section), run the app as an unprivileged user, or make those folders searchable by "
            f"others (chmod o+x) so that reward code runs as uid {SANDBOX_UID}.")
    prefix = _unshare_net_prefix()
    env = dict(CLEAN_ENV)
    if private_dir:
        env["HOME"] = env["TMPDIR"] = private_dir
    details = [
        f"NOT ISOLATED: rlimits mode, allowed by {ALLOW_UNISOLATED}" + (f" ({why_not})" if why_not else "") +
        ": no filesystem isolation; hidden paths are NOT masked and the whole filesystem is readable with the "
        "sandbox's uid",
        "no network (unshare -n)" if prefix else "network NOT isolated (unshare -n does not work here)",
        f"runs as uid {SANDBOX_UID}" if drop else f"runs as the app's uid {os.getuid()} (not root)",
        "cleaned environment: " + ", ".join(sorted(CLEAN_ENV)),
        _limits_line(limits, nproc_enforced=True),
        "killed with its parent (PR_SET_PDEATHSIG); its own session and process group",
    ]
    nproc_uid = SANDBOX_UID if drop else os.getuid()
    return Launch("rlimits", [*prefix, *python_argv()], env, private_dir, SANDBOX_UID if drop else None,
                  private_dir if drop else None, False, details, nproc_uid)


def isolation_info() -> dict:
    """What the sandbox does on this host, for pages, the health check and the CLI; never raises.

    {"mode": "bubblewrap" | "rlimits" | "refused", "ok": reward code runs, "isolated": it runs isolated,
     "details": [...], "reason" and "fix" (when refused)}."""
    try:
        launch = plan(SandboxLimits())
    except SandboxUnavailable as exc:
        return {"mode": "refused", "ok": False, "isolated": False, "reason": exc.reason, "fix": exc.fix,
                "details": [f"reward code is NOT run here: {exc.reason}", exc.fix]}
    return {"mode": launch.mode, "ok": True, "isolated": launch.mode == "bubblewrap", "reason": "", "fix": "",
            "details": list(launch.details)}
