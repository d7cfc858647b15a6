"""What a diagnostic bundle needs from the host a run lives on: package versions, the app's version, stack
dumps of an attempt's processes, and the scrubbing that keeps secrets out of anything copied into a bundle.

Stack dumps: `py-spy dump` of every Python process of the attempt on this host (the trainer, and on VERL its
Ray workers, found by the attempt's environment marker and its private Ray temp dir), each bounded in time.
Where py-spy is missing, a trainer that called `register_faulthandler()` dumps itself on SIGUSR2 (Python's
faulthandler) into `attempts/<K>/stacks/`. Standard library only: the web app and the supervisor import it.
"""
from __future__ import annotations

import contextlib
import faulthandler
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from training.rundir import AttemptDir, write_atomic
from training.supervisor import ATTEMPT_ENV, REPO_ROOT, attempt_processes

PACKAGES = ("python", "torch", "transformers", "verl", "vllm", "sglang", "ray", "peft", "accelerate", "tensordict",
            "flash-attn", "trl", "numpy", "django", "celery")
DUMP_SIGNAL = signal.SIGUSR2
REDACTED = "[redacted]"
# Environment or setting names whose values are secrets: a secret word standing as a word of the name
# (HF_TOKEN, DB_PASSWORD, WANDB_API_KEY; not TOKENIZERS_PARALLELISM, max_tokens or data.prompt_key).
SECRET_NAME = re.compile(r"(?<![A-Za-z])(?:SECRET|PASSWORD|PASSWD|PASS|PWD|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY"
                         r"|PRIVATE|CREDENTIALS?|AUTH|AUTHORIZATION|COOKIE|SESSION|SESSIONID|SIGNATURE|DSN)"
                         r"(?![A-Za-z])|^KEY$", re.I)
_URL_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]*):[^@\s/'\"]+@", re.I)
# `NAME=value` / `NAME: value` in text, where the name ends with a secret word.
_ASSIGNED = re.compile(r"(?P<name>[A-Za-z0-9_.-]*?(?<![A-Za-z])(?:SECRET|SECRET_KEY|PASSWORD|PASSWD|PWD|TOKEN|API_?KEY"
                       r"|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?|SIGNATURE))(?P<sep>['\"]?\s*[=:]\s*['\"]?)"
                       r"(?P<value>[^\s'\",;}]+)", re.I)
_AUTH_HEADER = re.compile(r"(Authorization\s*[:=]\s*['\"]?(?:Token|Bearer|Basic)\s+)([^\s'\"]+)", re.I)


# -- versions ----------------------------------------------------------------------------------

def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str]:
    """Installed versions ("not installed" when absent), read from package metadata: nothing is imported."""
    out = {}
    for name in names:
        if name == "python":
            out[name] = sys.version.split()[0]
            continue
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def app_version(root: Path = REPO_ROOT) -> dict[str, str]:
    """The app's version: `git describe` of its checkout when there is one, else its VERSION file, else the
    version pyproject.toml declares."""
    git = shutil.which("git")
    if git and (root / ".git").exists():
        try:
            describe = subprocess.run([git, "-C", str(root), "describe", "--always", "--dirty", "--tags"],
                                      capture_output=True, text=True, timeout=10)
            commit = subprocess.run([git, "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=10)
            if describe.returncode == 0:
                return {"source": "git", "describe": describe.stdout.strip(), "commit": commit.stdout.strip()}
        except (OSError, subprocess.TimeoutExpired):
            pass
    version_file = root / "VERSION"
    if version_file.is_file():
        return {"source": "VERSION", "describe": version_file.read_text(errors="replace").strip()[:200]}
    match = re.search(r'^version\s*=\s*"([^"]+)"', (root / "pyproject.toml").read_text(errors="replace")
                      if (root / "pyproject.toml").is_file() else "", re.M)
    return {"source": "pyproject.toml", "describe": match.group(1) if match else "unknown"}


# -- secrets -----------------------------------------------------------------------------------

def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(str(name)))


class Scrubber:
    """Removes secrets from text: every known secret value (longest first), credentials in URLs,
    `NAME=value` where the name says secret, and Authorization headers."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = {str(s) for s in secrets if s is not None and len(str(s)) >= 6}
        self.values = sorted(values, key=len, reverse=True)

    @classmethod
    def from_environment(cls, extra: Iterable[str] = (), env: Mapping[str, str] | None = None) -> Scrubber:
        """Known secrets plus every value of this process's environment whose name says secret."""
        env = os.environ if env is None else env
        return cls([*extra, *(v for k, v in env.items() if is_secret_name(k))])

    def text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        text = _URL_USERINFO.sub(rf"\1:{REDACTED}@", text)
        text = _AUTH_HEADER.sub(rf"\1{REDACTED}", text)
        return _ASSIGNED.sub(lambda m: f"{m['name']}{m['sep']}{REDACTED}", text)

    def env(self, env: Mapping[str, Any]) -> dict[str, Any]:
        """An environment (or settings) mapping with secret-named values replaced and the rest scrubbed."""
        return {k: REDACTED if is_secret_name(k) else self.value(v) for k, v in env.items()}

    def value(self, value: Any) -> Any:
        """A JSON-like value scrubbed throughout (mappings by key name too)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return self.env(value)
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value


# -- stack dumps -------------------------------------------------------------------------------

def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _is_python(pid: int, cmdline: str) -> bool:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    return exe.startswith("python") or cmdline.startswith("ray::") or "python" in cmdline.split(" ", 1)[0]


def _scratch_dirs(adir: AttemptDir) -> list[str]:
    try:
        dirs = json.loads(adir.launch.read_text()).get("scratch_dirs") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [d for d in dirs if isinstance(d, str) and os.path.isabs(d) and len(d.strip("/")) > 4]


def attempt_pids(attempt_dir: str | Path) -> list[int]:
    """Processes of the attempt on this host: its environment marker, and (Ray workers that a raylet started
    with a clean environment) those naming its private Ray temp dir."""
    adir = AttemptDir(Path(attempt_dir).resolve())
    pids = set(attempt_processes(adir.path))
    dirs = _scratch_dirs(adir)
    if dirs:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid() and any(d in _cmdline(int(entry)) for d in dirs):
                pids.add(int(entry))
    return sorted(pids)


def py_spy() -> str | None:
    """The py-spy binary (a dependency of ray[default]; in this interpreter's bin folder or on PATH)."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which("py-spy")


def _py_spy_dump(binary: str, pid: int, timeout_s: float) -> str:
    try:
        out = subprocess.run([binary, "dump", "--pid", str(pid)], capture_output=True, text=True,
                             timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        return f"(py-spy gave no dump within {timeout_s:.0f} s)\n"
    except OSError as exc:
        return f"(py-spy could not run: {exc})\n"
    return out.stdout if out.returncode == 0 and out.stdout.strip() else f"(py-spy failed: {out.stderr.strip()})\n"


def register_faulthandler(attempt_dir: str | Path | None = None) -> Path | None:
    """Let `dump_stacks` ask this process for its threads' stacks on SIGUSR2 (used where py-spy is missing).

    Writes to `<attempt>/stacks/faulthandler-<pid>.txt`; the attempt comes from WORKBENCH_ATTEMPT_DIR. Returns the
    file, or None outside an attempt."""
    attempt_dir = attempt_dir or os.environ.get(ATTEMPT_ENV)
    if not attempt_dir:
        return None
    folder = AttemptDir(Path(attempt_dir)).stacks
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"faulthandler-{os.getpid()}.txt"
    fh = open(path, "a", buffering=1)  # noqa: SIM115 - faulthandler writes to it until the process ends
    faulthandler.register(DUMP_SIGNAL, file=fh, all_threads=True, chain=False)
    return path


def _faulthandler_dump(path: Path, pid: int, timeout_s: float) -> str:
    start = path.stat().st_size
    os.kill(pid, DUMP_SIGNAL)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        time.sleep(0.1)
        if path.stat().st_size > start:
            time.sleep(0.2)  # let it finish the other threads
            with path.open("rb") as fh:
                fh.seek(start)
                return fh.read().decode(errors="replace")
    return f"(no faulthandler dump within {timeout_s:.0f} s)\n"


def dump_stacks(attempt_dir: str | Path, timeout_s: float = 30.0, per_process_s: float = 10.0,
                max_processes: int = 32) -> str:
    """The Python stacks of every process of the attempt on this host, as text; bounded by `timeout_s` overall."""
    adir = AttemptDir(Path(attempt_dir).resolve())
    deadline = time.time() + timeout_s
    binary = py_spy()
    pids = [p for p in attempt_pids(adir.path) if _is_python(p, _cmdline(p))]
    registered = {int(p.stem.split("-", 1)[1]): p for p in adir.stacks.glob("faulthandler-*.txt")
                  if p.stem.split("-", 1)[1].isdigit()}
    how = "py-spy dump" if binary else "faulthandler (SIGUSR2; py-spy is not installed)"
    parts = [f"Stack dump of attempt {adir.path.name} at {time.strftime('%Y-%m-%d %H:%M:%S %Z')} by {how}: "
             f"{len(pids)} Python process(es) on {os.uname().nodename}\n"]
    for pid in pids[:max_processes]:
        left = deadline - time.time()
        cmd = _cmdline(pid)[:300]
        if left <= 0:
            parts.append(f"\n=== pid {pid}: {cmd}\n(skipped: the dump's {timeout_s:.0f} s were used up)\n")
            continue
        if binary:
            body = _py_spy_dump(binary, pid, min(per_process_s, left))
        elif pid in registered:
            body = _faulthandler_dump(registered[pid], pid, min(per_process_s, left))
        else:
            body = "(no py-spy, and this process registered no faulthandler)\n"
        parts.append(f"\n=== pid {pid}: {cmd}\n{body}")
    if len(pids) > max_processes:
        parts.append(f"\n({len(pids) - max_processes} more processes not dumped)\n")
    return "".join(parts)


def write_stacks(attempt_dir: str | Path, text: str) -> Path:
    """Keep a dump in `<attempt>/stacks/<unix time>.txt` (the bundle collects them)."""
    return write_atomic(AttemptDir(Path(attempt_dir)).stacks / f"{int(time.time())}.txt", text)


def saved_stacks(attempt_dir: str | Path) -> list[Path]:
    folder = AttemptDir(Path(attempt_dir)).stacks
    return sorted(folder.glob("[0-9]*.txt")) if folder.is_dir() else []


def main(argv: list[str] | None = None) -> int:
    """`python -m training.diagnostics --attempt-dir DIR`: print (and keep) a stack dump of a running attempt, on
    the host where it runs."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--attempt-dir", required=True)
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args(argv)
    text = dump_stacks(args.attempt_dir, timeout_s=args.timeout)
    with contextlib.suppress(OSError):
        print(f"kept in {write_stacks(args.attempt_dir, text)}", file=sys.stderr)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
