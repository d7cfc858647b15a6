"""VERL's V1 trainer dumps each step's rollouts like the legacy one: reward extras and group uids.

V1 (`trainer.use_v1=true`) writes `rollout_data_dir/<step>.jsonl` in `PPOTrainer._log_rollout_data`
(verl/trainer/ppo/v1/trainer_base.py, VERL 0.9.1) with "uid" set to the TransferQueue key
`{prompt uid}_{session}_{output}` (one per sample, so no groups) and without the reward's extra keys
(our wrapper's "r/<component>", "err/<component>", "log/<component>"), which the legacy trainer and
V1's own validation dump keep. The rollout store needs both (training.rollouts). This patch fills
them in from the same TransferQueue rows ("uid" and "extra_fields.reward_extra_info") before the
dump is written. Imported by the plugin only in a V1 run's processes (V1_ENV in their environment).
"""
from __future__ import annotations

from typing import Any

import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

_original_log = PPOTrainer._log_rollout_data
_original_dump = PPOTrainer._dump_generations


def merge_extras(extras: dict[str, list], group_uids: list[Any], infos: list[Any]) -> dict[str, list]:
    """`extras` with "uid" set to `group_uids` and each key of the per-sample `infos` as a column."""
    out = {**extras, "uid": list(group_uids)}
    keys = list(dict.fromkeys(k for info in infos if isinstance(info, dict) for k in info))
    for key in keys:
        if key not in out:
            out[key] = [info.get(key) if isinstance(info, dict) else None for info in infos]
    return out


def _log_rollout_data(self, batch, timing_raw, rollout_data_dir):
    self._workbench_rollout_batch = batch
    try:
        return _original_log(self, batch, timing_raw, rollout_data_dir)
    finally:
        self._workbench_rollout_batch = None


def _dump_generations(self, inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path):
    batch = getattr(self, "_workbench_rollout_batch", None)
    keys = reward_extra_infos_dict.get("uid")
    if batch is not None and keys:
        data = tq.kv_batch_get(keys=list(keys), partition_id=batch.partition_id, select_fields=["uid", "extra_fields"])
        # pop, as VERL does: it gives the non-tensor stack (tolist), where indexing gives a LinkedList
        uids, extra = data.pop("uid").tolist(), data.pop("extra_fields", None)
        infos = [e.get("reward_extra_info", {}) if isinstance(e, dict) else {}
                 for e in (extra.tolist() if extra is not None else [None] * len(keys))]
        reward_extra_infos_dict = merge_extras(reward_extra_infos_dict, uids, infos)
    return _original_dump(self, inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path)


if not getattr(PPOTrainer._dump_generations, "_workbench", False):
    _dump_generations._workbench = True  # type: ignore[attr-defined]
    PPOTrainer._log_rollout_data = _log_rollout_data  # type: ignore[method-assign]
    PPOTrainer._dump_generations = _dump_generations  # type: ignore[method-assign]
