"""Why a clean exit came before the planned steps, read from VERL's start-up lines."""
from __future__ import annotations

from training.run_end import short_end_reason


def test_prompts_left_out_for_length_and_the_epoch_size_are_named():
    log = ("dataset len: 36\nfilter dataset len: 20\ndataset len: 6\nfilter dataset len: 6\n"
           "Size of train dataloader: 1, Size of val dataloader: 1\nTotal training steps: 3\n")
    assert short_end_reason(log, 4, 3) == (
        "Ended at step 3 of the 4 planned: VERL kept 20 of the 36 training prompts (the others are longer than the "
        "max prompt length); the data gives 1 step per epoch; VERL planned 3 steps in all. Raise the epochs or "
        "lower the max steps, or add prompts.")


def test_a_log_without_verls_plan_still_says_the_steps():
    assert short_end_reason("", 10, 2) == ("Ended at step 2 of the 10 planned: the trainer exited cleanly before it; "
                                           "its log says no more (see the live log).")
