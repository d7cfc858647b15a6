"""The entry point refuses bad jobs with a clear message (exit 2), never a bare traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.local.config import JobError, load_job
from training.local.train import run_job

ROOT = Path(__file__).resolve().parents[3]


def _edit(run: Path, **hp) -> Path:
    job = json.loads((run / "job.json").read_text())
    job["hp"].update(hp)
    (run / "job.json").write_text(json.dumps(job))
    return run


@pytest.mark.parametrize("hp,message", [
    # the New job form's own messages (training.hparams.local_hp), prefixed with the hp key
    ({"group_size": 1}, "hp.group_size: GRPO needs a group size n of at least 2"),
    ({"micro_batch_size": 5}, "hp.micro_batch_size: Each update holds 128 sequences"),
    ({"max_prompt_length": 10, "max_response_length": 10, "max_seq_len": 16}, "hp.max_seq_len: Max sequence length 16 "
                                                                               "cannot hold"),
    ({"lr": 0}, "hp.lr: Learning rate must be strictly between 0 and 1"),
    ({"loss_agg_mode": "mean"}, "hp.loss_agg_mode: must be one of"),
    ({"batch_size": "lots"}, "hp.batch_size: expected a whole number"),
])
def test_bad_hyperparameters_are_refused(make_run, hp, message):
    run = _edit(make_run("grpo"), **hp)
    with pytest.raises(JobError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_job(run)


def test_a_job_json_of_an_older_app_loads_with_the_schema_defaults_for_what_it_lacks(make_run):
    from training import hparams

    run = make_run("grpo")
    job = json.loads((run / "job.json").read_text())
    del job["hp"]["kl_coef"], job["hp"]["lr"]  # settings added after that app was written
    job["hp"]["batch_size"] = str(job["hp"]["batch_size"])  # typed by the schema, as the form types it
    (run / "job.json").write_text(json.dumps(job))
    loaded = load_job(run)
    assert loaded.hp.kl_coef == hparams.BY_KEY["kl_coef"].default and loaded.hp.lr == hparams.BY_KEY["lr"].default
    assert isinstance(loaded.hp.batch_size, int)


def test_a_run_in_which_no_prompt_fits_max_prompt_length_is_refused(make_run):
    run = _edit(make_run("grpo"), max_prompt_length=3)
    with pytest.raises(JobError, match=r"train.jsonl: every prompt is longer than hp.max_prompt_length=3 "
                                       r"\(row 1: 4 tokens\)"):
        run_job(run)


def test_prompts_longer_than_max_prompt_length_are_left_out_as_verl_does(capsys):
    from training.local.data import fit_prompts

    class Words:  # a tokenizer whose tokens are words
        chat_template = None

        def __call__(self, text, add_special_tokens=False):
            return type("Enc", (), {"input_ids": text.split()})()

    rows = [{"prompt": "one two"}, {"prompt": "one two three four"}, {"prompt": "one"}]
    kept, texts = fit_prompts(rows, Words(), 2, "train.jsonl")
    assert kept == [rows[0], rows[2]] and texts == ["one two", "one"]
    assert "left out 1 of 3 prompts longer than hp.max_prompt_length=2 (row 2: 4 tokens)" in capsys.readouterr().out


def test_batch_larger_than_the_data_is_lowered_to_the_rows_as_verl_does(make_run, capsys):
    """A small dataset (say, an exported arena) trains one batch of all its rows per step."""
    run = _edit(make_run("reward_model"), batch_size=10_000, max_steps=1, save_freq=0, test_freq=0)
    run_job(run)
    assert "hp.batch_size=10000 is larger than the 512 training rows; using 512" in capsys.readouterr().out


def test_cli_exits_2_with_the_message(make_run):
    run = _edit(make_run("grpo"), group_size=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "training.local.train", "--run-dir", str(run)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert "error: hp.group_size: GRPO needs a group size n of at least 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_lengths_beyond_the_models_positions_are_refused(make_run):
    run = _edit(make_run("grpo"), max_prompt_length=20, max_response_length=20, max_seq_len=64)
    with pytest.raises(JobError, match="exceeds the model's max_position_embeddings = 32"):
        run_job(run)
