"""Why a run that exited cleanly stopped before its planned steps, read from its trainer's log (pure).

VERL prints its plan as it starts (verl/trainer/ppo/ray_trainer.py: "Size of train dataloader: N, ...",
"Total training steps: N"; verl/utils/dataset/rl_dataset.py: "dataset len: N" then "filter dataset len: N"
when it leaves out prompts longer than data.max_prompt_length, for the training split first).
"""
from __future__ import annotations

import re

_DATALOADER = re.compile(r"Size of train dataloader: (\d+)")
_TOTAL = re.compile(r"Total training steps: (\d+)")
_ROWS = re.compile(r"(?<!filter )dataset len: (\d+)")
_KEPT = re.compile(r"filter dataset len: (\d+)")


def short_end_reason(log_text: str, planned: int, reached: int) -> str:
    """One sentence: the step reached, the step planned, and what the log says cut the run short."""
    head = f"Ended at step {reached} of the {planned} planned"
    per_epoch, total = _DATALOADER.findall(log_text), _TOTAL.findall(log_text)
    rows, kept = _ROWS.findall(log_text), _KEPT.findall(log_text)
    why = []
    if rows and kept and int(kept[0]) < int(rows[0]):
        why.append(f"VERL kept {kept[0]} of the {rows[0]} training prompts (the others are longer than the max "
                   "prompt length)")
    if per_epoch:
        why.append(f"the data gives {per_epoch[-1]} step{'s' if per_epoch[-1] != '1' else ''} per epoch")
    if total and int(total[-1]) < planned:
        why.append(f"VERL planned {total[-1]} steps in all")
    if not why:
        return f"{head}: the trainer exited cleanly before it; its log says no more (see the live log)."
    return f"{head}: " + "; ".join(why) + ". Raise the epochs or lower the max steps, or add prompts."
