"""Export a VERL FSDP checkpoint to a HuggingFace folder with `python -m verl.model_merger`.

The merger runs on CPU. For LoRA runs it writes base weights plus `lora_adapter/`, and takes
`lora_alpha` from `<local_dir>/lora_train_meta.json`; when that file is missing it silently
writes alpha=0, which disables the adapter. So we write the file before merging (unless VERL
already did) and patch `adapter_config.json` afterwards if alpha still came out as 0.

CLI: `python -m training.backends.verl_export --run-dir DIR --step N [--target-dir OUT]`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.backends.base import REPO_ROOT, BackendError, load_spec, python_executable
from training.rundir import RunDir


@dataclass
class ExportPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    target_dir: Path
    lora_rank: int
    lora_alpha: float | None


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return RunDir(Path(run_dir).resolve()).checkpoints / f"global_step_{int(step)}"


def merge_argv(actor_dir: Path, target_dir: Path) -> list[str]:
    """The merger command for one checkpoint's `actor/` folder."""
    return [python_executable(), "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(actor_dir), "--target_dir", str(target_dir)]


def write_lora_train_meta(actor_dir: Path, rank: int, alpha: float, overwrite: bool = False) -> Path | None:
    """Write `{"r", "lora_alpha", "task_type"}` where the merger looks for it; keep VERL's own file."""
    path = Path(actor_dir) / "lora_train_meta.json"
    if path.exists() and not overwrite:
        return None
    # The merger casts alpha with int(); fractional alphas are patched into adapter_config later.
    path.write_text(json.dumps({"r": int(rank), "lora_alpha": int(alpha), "task_type": "CAUSAL_LM"}, indent=2))
    return path


def patch_adapter_config(target_dir: Path, alpha: float) -> bool:
    """Set `lora_alpha` in `<target_dir>/lora_adapter/adapter_config.json` if the merger got it wrong."""
    path = Path(target_dir) / "lora_adapter" / "adapter_config.json"
    if not path.exists():
        return False
    cfg = json.loads(path.read_text())
    if cfg.get("lora_alpha") == alpha:
        return False
    cfg["lora_alpha"] = alpha
    path.write_text(json.dumps(cfg, indent=4))
    return True


def plan_export(spec: dict[str, Any], run_dir: Path, step: int, target_dir: Path | None = None) -> ExportPlan:
    """Check the checkpoint, write the LoRA metadata it needs and return the merge command."""
    ckpt = checkpoint_dir(run_dir, step)
    actor = ckpt / "actor"
    if not actor.is_dir():
        raise BackendError(f"checkpoint {ckpt} has no actor/ folder (deleted, or not a VERL checkpoint)")
    if not any(actor.glob("model_world_size_*_rank_*.pt")):
        raise BackendError(f"{actor} holds no FSDP model shards")
    target = Path(target_dir) if target_dir else RunDir(Path(run_dir).resolve()).export_step(step)
    lora = ((spec.get("hp") or {}).get("lora") or {})
    rank = int(lora.get("rank") or 0)
    alpha = float(lora.get("alpha", 16)) if rank > 0 else None
    if rank > 0:
        write_lora_train_meta(actor, rank, alpha or 16)
    env = {"PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}  # the merger needs no GPU
    return ExportPlan(merge_argv(actor, target), env, str(REPO_ROOT), target, rank, alpha)


def finish_export(plan: ExportPlan) -> None:
    """Fix the adapter's alpha after a successful merge (no-op for full fine-tunes)."""
    if plan.lora_rank > 0 and plan.lora_alpha is not None:
        patch_adapter_config(plan.target_dir, plan.lora_alpha)


def run_export(spec: dict[str, Any], run_dir: Path, step: int, target_dir: Path | None = None,
               timeout: float | None = None) -> Path:
    """Plan, run and finish an export; return the HF folder. Raises BackendError on failure."""
    plan = plan_export(spec, run_dir, step, target_dir)
    proc = subprocess.run(plan.argv, cwd=plan.cwd, env={**os.environ, **plan.env}, timeout=timeout,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BackendError(f"model merger failed ({proc.returncode}): {proc.stderr[-2000:]}", permanent=False)
    finish_export(plan)
    return plan.target_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--step", required=True, type=int)
    ap.add_argument("--target-dir", type=Path)
    args = ap.parse_args(argv)
    try:
        out = run_export(load_spec(args.run_dir), args.run_dir, args.step, args.target_dir)
    except BackendError as exc:
        print(f"export failed: {exc.message}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
