"""Checkpoint inventory, retention and HF export for run directories (local and VERL layouts).

Layout (docs/run-directory.md): `<run_dir>/checkpoints/global_step_N/` plus
`latest_checkpointed_iteration.txt`. Local checkpoints hold `model/` (an HF folder or a peft
adapter), `trainer_state.pt` and `manifest.json`; VERL ones hold `actor/` and `data.pt`.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from training.rundir import RunDir, write_atomic

STEP_DIR = re.compile(r"^global_step_(\d+)$")
LATEST_FILE = "latest_checkpointed_iteration.txt"
PROTECTED_FILE = "protected.json"
TMP_PREFIX = ".tmp-"


@dataclass
class CheckpointInfo:
    step: int
    path: Path
    format: str  # "local" | "verl" | "unknown"
    size_bytes: int
    lora: bool
    manifest: dict | None


def checkpoint_root(path: str | Path) -> Path:
    """Accept a run dir or its checkpoints/ folder and return the checkpoints/ folder."""
    p = Path(path)
    run = RunDir(p)
    return run.checkpoints if run.checkpoints.is_dir() or run.job_spec.exists() else p


def step_of(path: str | Path) -> int:
    """Parse N out of a `.../global_step_N` path (the folder itself, as VERL requires)."""
    m = STEP_DIR.match(Path(path).name)
    if not m:
        raise ValueError(f"{path} is not a global_step_N checkpoint folder")
    return int(m.group(1))


def dir_size(path: str | Path) -> int:
    """Total bytes of the regular files under `path` (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # deleted while we walked (checkpoint cleanup)
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def read_manifest(ckpt: Path) -> dict | None:
    """The checkpoint's manifest.json as a dict, or None when missing or unreadable."""
    try:
        data = json.loads((ckpt / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _describe(ckpt: Path, with_size: bool) -> CheckpointInfo:
    manifest = read_manifest(ckpt)
    if manifest and manifest.get("format"):
        fmt = manifest["format"]
    elif (ckpt / "trainer_state.pt").exists():
        fmt = "local"
    elif (ckpt / "actor").is_dir():
        fmt = "verl"
    else:
        fmt = "unknown"
    lora = bool(manifest.get("lora")) if manifest else (
        (ckpt / "model" / "adapter_config.json").exists() or (ckpt / "actor" / "lora_adapter").is_dir()
    )
    return CheckpointInfo(step_of(ckpt), ckpt, fmt, dir_size(ckpt) if with_size else 0, lora, manifest)


def discover(run_dir: str | Path, with_size: bool = True) -> list[CheckpointInfo]:
    """List the complete checkpoints of a run, oldest first (temp folders are skipped)."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    found = [_describe(p, with_size) for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name)]
    return sorted(found, key=lambda c: c.step)


def latest_step(run_dir: str | Path) -> int | None:
    """The step in latest_checkpointed_iteration.txt, or None when absent or unreadable."""
    try:
        return int((checkpoint_root(run_dir) / LATEST_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def read_protected(run_dir: str | Path) -> set[int]:
    """Steps the web app marked as not deletable (checkpoints/protected.json, a JSON list)."""
    try:
        data = json.loads((checkpoint_root(run_dir) / PROTECTED_FILE).read_text())
    except (OSError, ValueError):
        return set()
    return {int(s) for s in data if isinstance(s, (int, str)) and str(s).isdigit()}


def plan_retention(steps: Iterable[int], keep_last_k: int | None, protected: Iterable[int] = ()) -> list[int]:
    """Return the steps to delete: all but the newest `keep_last_k` and the protected ones.

    keep_last_k None or <= 0 keeps everything.
    """
    ordered = sorted(set(steps))
    if not keep_last_k or keep_last_k <= 0:
        return []
    keep = set(ordered[-keep_last_k:]) | set(protected)
    return [s for s in ordered if s not in keep]


def current_attempt(environ: dict | None = None) -> int | None:
    """The attempt this process trains for (the supervisor's marker names its folder), None outside one."""
    from training.supervisor import ATTEMPT_ENV

    name = Path((os.environ if environ is None else environ).get(ATTEMPT_ENV, "")).name
    return int(name) if name.isdigit() else None


def apply_retention(run_dir: str | Path, keep_last_k: int | None, attempt: int | None = None) -> list[int]:
    """Delete the checkpoints `plan_retention` selects; returns the deleted steps.

    With `attempt`, only that attempt's own checkpoints (manifest "attempt") count: another attempt's
    folders are never deleted, even by a trainer left running after its attempt was given up.
    """
    root = checkpoint_root(run_dir)
    infos = discover(root, with_size=False)
    if attempt is not None:
        infos = [c for c in infos if (c.manifest or {}).get("attempt") == attempt]
    doomed = plan_retention([c.step for c in infos], keep_last_k, read_protected(root))
    for step in doomed:
        shutil.rmtree(root / f"global_step_{step}", ignore_errors=True)
    return doomed


def publish_checkpoint(run_dir: str | Path, step: int, write: Callable[[Path], None], manifest: dict) -> Path:
    """Write a checkpoint atomically: `write(tmp_dir)`, add manifest.json, rename into place.

    A kill at any point leaves either the previous state or the complete new folder; the
    latest file moves only after the rename succeeded.
    """
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"global_step_{step}"
    tmp = root / f"{TMP_PREFIX}global_step_{step}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    (tmp / "manifest.json").write_text(json.dumps({"step": step, "time": time.time(), **manifest}, indent=1))
    if final.exists():  # re-saving a step (e.g. a branch resumed before it): swap, then drop the old one
        trash = root / f"{TMP_PREFIX}trash-{step}.{os.getpid()}"
        os.rename(final, trash)
        os.rename(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(tmp, final)
    write_atomic(root / LATEST_FILE, str(step))
    return final


def clean_stale_temp(run_dir: str | Path) -> None:
    """Remove half-written temp folders left by a killed save."""
    root = checkpoint_root(run_dir)
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(TMP_PREFIX):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def verl_merge_command(ckpt_dir: str | Path, out_dir: str | Path) -> list[str]:
    """The model-merger command that turns a VERL FSDP checkpoint into an HF folder."""
    return [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(Path(ckpt_dir) / "actor"), "--target_dir", str(out_dir)]


def export_hf(ckpt_dir: str | Path, out_dir: str | Path, merge_lora: bool = True,
              base_model_path: str | Path | None = None) -> Path:
    """Export a checkpoint as an HF folder in `out_dir`.

    Local format: a full model is copied; a LoRA adapter is merged into its base when
    `merge_lora` (base from the manifest unless `base_model_path` is given) or copied as an
    adapter folder otherwise. VERL format: runs VERL's model merger (LoRA stays unfused there).
    """
    ckpt, out = Path(ckpt_dir), Path(out_dir)
    info = _describe(ckpt, with_size=False)
    if info.format == "verl":
        out.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(verl_merge_command(ckpt, out), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"verl.model_merger failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return out
    model_dir = ckpt / "model"
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{ckpt} has no model/ folder; is it a local-backend checkpoint?")
    tmp = out.with_name(f"{TMP_PREFIX}{out.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    is_adapter = (model_dir / "adapter_config.json").exists()
    if is_adapter and merge_lora:
        _merge_adapter(model_dir, tmp, info.manifest or {}, base_model_path)
    else:
        shutil.copytree(model_dir, tmp)
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.rename(tmp, out)
    return out


def _merge_adapter(adapter_dir: Path, out: Path, manifest: dict, base_model_path) -> None:
    from peft import PeftModel

    from training.models import load_model_and_tokenizer

    base = base_model_path or manifest.get("base_model")
    if not base:
        cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
        base = cfg.get("base_model_name_or_path")
    if not base or not Path(base).is_dir():
        raise FileNotFoundError(f"base model for the LoRA adapter not found ({base!r}); pass base_model_path")
    kind = "seq_cls" if manifest.get("kind") == "reward_model" else "causal_lm"
    model, tok = load_model_and_tokenizer(base, "cpu", "float32", kind=kind)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(out)
    tok.save_pretrained(out)
