"""Reading a trainer's log for people (pure): terminal colour codes out, and the start-up phase it is in.

Ray and VERL colour their output for a terminal; the run page shows text. A VERL run spends minutes
before its first step (Ray, the workers, the model, a first validation); the phase says which, from
the lines VERL and Ray print as they go (verl/trainer/main_ppo.py, verl/trainer/ppo/ray_trainer.py,
verl/utils/dataset/rl_dataset.py), the last one seen winning.
"""
from __future__ import annotations

import re

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and lone escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Platform override from VERL_PLATFORM|\[validate_config\]"), "Checking VERL's configuration"),
    (re.compile(r"ray init kwargs|Started a local Ray instance|Connected to Ray cluster|Job submission server"),
     "Starting Ray"),
    (re.compile(r"Using dataset class|dataset len: \d+"), "Loading the data"),
    (re.compile(r"Size of train dataloader|Total training steps: \d+"),
     "Starting VERL's workers and loading the model"),
    (re.compile(r"Load from checkpoint folder|Resuming from "), "Loading the checkpoint"),
    (re.compile(r"Initial validation metrics"), "First training step (validation done)"),
    (re.compile(r"Training Progress"), "First training step"),
)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def startup_phase(lines: list[str]) -> str | None:
    """The phase of a run that has not logged a step yet, from its log lines (None before any is known):
    the furthest phase whose marker appears."""
    furthest = -1
    for line in lines:
        for i in range(len(PHASES) - 1, furthest, -1):
            if PHASES[i][0].search(line):
                furthest = i
                break
    return PHASES[furthest][1] if furthest >= 0 else None
