"""VERL's rollout dumps get their summary beside them, as the local trainer writes it (training.ingest).

Both VERL trainers (the legacy `RayPPOTrainer` and V1's `PPOTrainer`, VERL 0.9.1) write each step's
`rollout_data_dir/<step>.jsonl` in the static `_write_generations`, on a background thread. Once it has written a
rollout dump (not a validation dump), this wrapper writes `<step>.summary.json` next to it
(`training.ingest.write_rollout_summary`): the web app's sync then reads a few hundred bytes instead of the dump.
A failure there never fails the dump: the sync computes the same metrics from the dump without it.
"""
from __future__ import annotations

import importlib.abc
import logging
import sys
from pathlib import Path
from typing import Any

from training import rollouts
from training.ingest import write_rollout_summary

log = logging.getLogger(__name__)


def with_summary(write: Any) -> Any:
    """VERL's `_write_generations`, followed by the summary of a rollout dump."""
    if getattr(write, "_workbench_summary", False):
        return write

    def _write_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path, global_steps):
        out = write(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path, global_steps)
        folder = Path(dump_path)
        if folder.name == rollouts.KIND and folder.parent.name == "samples":
            try:
                write_rollout_summary(folder.parent.parent, int(global_steps))
            except Exception:  # noqa: BLE001 - the sync falls back to the dump
                log.exception("could not write the summary of rollout step %s", global_steps)
        return out

    _write_generations._workbench_summary = True  # type: ignore[attr-defined]
    return staticmethod(_write_generations)


# The trainer classes, by module: patched when their module is imported (importing them here would cost every
# VERL process, workers included, seconds for a class only the driver uses).
TRAINERS = {"verl.trainer.ppo.ray_trainer": "RayPPOTrainer", "verl.trainer.ppo.v1.trainer_base": "PPOTrainer"}


def patch(trainer_class: Any) -> None:
    trainer_class._write_generations = with_summary(trainer_class._write_generations)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it has the real finder's module run, then patches the trainer class in it."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in TRAINERS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                run = spec.loader.exec_module

                def exec_module(module, run=run):
                    run(module)
                    patch(getattr(module, TRAINERS[fullname]))

                spec.loader.exec_module = exec_module
                return spec
        return None


def install() -> None:
    """Patch the trainers already imported; the others as they are imported."""
    for name, cls in TRAINERS.items():
        if name in sys.modules:
            patch(getattr(sys.modules[name], cls))
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
