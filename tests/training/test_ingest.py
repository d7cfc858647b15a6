"""Metrics, checkpoints and samples in VERL's exact formats, written by verl's own code where possible."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from training import garbled
from training.ingest import (
    MetricsTail,
    describe_checkpoint,
    discover_checkpoints,
    discover_new_checkpoints,
    parse_console_line,
    parse_metrics_line,
    read_metrics,
    read_samples,
    rollout_groups,
    rollout_metrics,
    sample_steps,
)

verl_tracking = pytest.importorskip("verl.utils.tracking")


def _file_logger(path, monkeypatch):
    """verl's FileLogger (mode "wb", orjson) writing to `path`, as trainer.logger=[...,"file"] does."""
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    return verl_tracking.FileLogger("p", "e")


def test_reads_verl_file_logger_output_with_nan_as_none(tmp_path, monkeypatch):
    path = tmp_path / "attempts" / "1" / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    log = _file_logger(path, monkeypatch)
    log.log({"critic/score/mean": np.float32(0.25), "actor/kl_loss": float("nan"), "perf/throughput": 12}, step=1)
    log.log({"critic/score/mean": 0.5}, step=2)
    log.finish()
    assert read_metrics(tmp_path) == {1: {"critic/score/mean": 0.25, "actor/kl_loss": None, "perf/throughput": 12.0},
                                      2: {"critic/score/mean": 0.5}}


def test_later_attempt_wins_per_key_and_missing_steps_are_fine(tmp_path):
    a1 = tmp_path / "attempts" / "1"
    a2 = tmp_path / "attempts" / "10"  # numeric order, not string order
    a1.mkdir(parents=True)
    a2.mkdir(parents=True)
    a1.joinpath("metrics.jsonl").write_text(
        '{"step":1,"data":{"r":0.1,"kl":0.0}}\n{"step":3,"data":{"r":0.3,"kl":0.02}}\n')
    a2.joinpath("metrics.jsonl").write_text('{"step":3,"data":{"val":0.9}}\n{"step":4,"data":{"r":0.4}}\n')
    (tmp_path / "attempts" / "2").mkdir()  # an attempt that died before logging
    assert read_metrics(tmp_path) == {1: {"r": 0.1, "kl": 0.0}, 3: {"r": 0.3, "kl": 0.02, "val": 0.9}, 4: {"r": 0.4}}
    a2.joinpath("metrics.jsonl").write_text('{"step":3,"data":{"r":0.35}}\n')
    assert read_metrics(tmp_path)[3]["r"] == 0.35


def test_a_torn_last_line_is_skipped(tmp_path):
    adir = tmp_path / "attempts" / "1"
    adir.mkdir(parents=True)
    adir.joinpath("metrics.jsonl").write_bytes(b'{"step":1,"data":{"r":1}}\n{"step":2,"data":{"r":')
    assert read_metrics(tmp_path) == {1: {"r": 1.0}}


@pytest.mark.parametrize("line", [b"", b"garbage", b'{"step":"x","data":{}}', b'{"step":1}', b'[1,2]',
                                  b'{"step":-1,"data":{}}'])
def test_foreign_lines_are_ignored(line):
    assert parse_metrics_line(line) is None


def test_tail_returns_only_new_complete_lines(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.read_new() == []  # not created yet
    log = _file_logger(path, monkeypatch)
    log.log({"r": 0.1}, step=1)
    assert tail.read_new() == [(1, {"r": 0.1})]
    assert tail.read_new() == []
    with path.open("ab") as fh:
        fh.write(b'{"step":2,"data":{"r":0.2}}\n{"step":3,"da')  # step 3 is mid-write
    assert tail.read_new() == [(2, {"r": 0.2})]
    with path.open("ab") as fh:
        fh.write(b'ta":{"r":0.3}}\n')
    assert tail.read_new() == [(3, {"r": 0.3})]
    log.finish()


def test_tail_starts_over_when_a_restart_truncates_the_file(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    first = _file_logger(path, monkeypatch)
    for step in range(1, 6):
        first.log({"r": step / 10}, step=step)
    first.finish()
    assert len(tail.read_new()) == 5
    second = _file_logger(path, monkeypatch)  # "wb": truncated, file now shorter than our offset
    second.log({"r": 0.9}, step=3)
    second.finish()
    assert tail.read_new() == [(3, {"r": 0.9})]


def test_tail_notices_a_truncation_that_regrew_past_the_offset(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step":1,"data":{"r":0.1}}\n')
    tail = MetricsTail(path)
    assert tail.read_new() == [(1, {"r": 0.1})]
    path.write_text('{"step":7,"data":{"r":0.7}}\n{"step":8,"data":{"r":0.8}}\n')  # same inode, rewritten
    assert tail.read_new() == [(7, {"r": 0.7}), (8, {"r": 0.8})]


def test_console_lines_in_verls_format_are_parsed():
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    data = {"critic/score/mean": np.float64(0.5), "actor/kl_loss": 0.01, "val-core/arith/acc/mean@1": 1,
            "bad": float("nan"), "text": "skipped"}
    line = "(TaskRunner pid=4242) " + concat_dict_to_str(data, step=7)
    step, parsed = parse_console_line(line)
    assert step == 7
    assert parsed == {"critic/score/mean": 0.5, "actor/kl_loss": 0.01, "val-core/arith/acc/mean@1": 1.0, "bad": None}
    assert parse_console_line("Training Progress: 10%") is None
    assert parse_console_line("training/global_step:3") is None


def test_console_log_is_the_fallback_without_a_metrics_file(tmp_path):
    adir = tmp_path / "attempts" / "1"
    adir.mkdir(parents=True)
    adir.joinpath("log.txt").write_text("starting\nstep:1 - r:0.5 - kl:0.1\nnoise\nstep:2 - r:0.75\n")
    assert read_metrics(tmp_path) == {1: {"r": 0.5, "kl": 0.1}, 2: {"r": 0.75}}
    assert read_metrics(tmp_path, console_fallback=False) == {}


# -- checkpoints -----------------------------------------------------------------------------

def _verl_ckpt(root, step, shards=True):
    """The layout verl's _save_checkpoint + FSDPCheckpointManager leave for world size 1."""
    actor = root / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    if shards:
        for kind in ("model", "optim", "extra_state"):
            (actor / f"{kind}_world_size_1_rank_0.pt").write_bytes(b"x" * 100)
    (actor / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 1}')
    (root / f"global_step_{step}" / "data.pt").write_bytes(b"d" * 10)


def test_discovers_verl_checkpoints_with_sizes_and_the_latest_marker(tmp_path):
    root = tmp_path / "checkpoints"
    _verl_ckpt(root, 10)
    _verl_ckpt(root, 20)
    _verl_ckpt(root, 30)  # being written: the tracker still says 20
    (root / "latest_checkpointed_iteration.txt").write_text("20")
    (root / "global_step_x").mkdir()
    (root / "notes.txt").write_text("not a checkpoint")
    infos = discover_checkpoints(tmp_path)
    assert [i.step for i in infos] == [10, 20, 30]
    assert [i.complete for i in infos] == [True, True, False]
    assert [i.is_latest for i in infos] == [False, True, False]
    assert all(i.format == "verl" and not i.has_manifest for i in infos)
    assert infos[0].size_bytes == 3 * 100 + len('{"FSDP_version": 2, "world_size": 1}') + 10


def test_a_checkpoint_whose_actor_was_cleaned_up_is_incomplete(tmp_path):
    root = tmp_path / "checkpoints"
    _verl_ckpt(root, 5, shards=False)  # max_actor_ckpt_to_keep removed the shards
    (root / "latest_checkpointed_iteration.txt").write_text("5")
    assert describe_checkpoint(root / "global_step_5", 5).complete is False


def test_discovers_local_checkpoints_by_manifest(tmp_path):
    ck = tmp_path / "checkpoints" / "global_step_4"
    (ck / "model").mkdir(parents=True)
    (ck / "manifest.json").write_text(json.dumps({"step": 4, "format": "local", "lora": True, "metrics": {}}))
    (tmp_path / "checkpoints" / "global_step_8" / "model").mkdir(parents=True)  # no manifest yet
    infos = discover_checkpoints(tmp_path)
    assert [(i.step, i.format, i.has_manifest, i.complete, i.lora) for i in infos] == [
        (4, "local", True, True, True), (8, "local", False, False, False)]


def test_no_checkpoints_dir_means_no_checkpoints(tmp_path):
    assert discover_checkpoints(tmp_path) == []
    assert discover_new_checkpoints(tmp_path, {}) == ([], set())


def test_recorded_checkpoints_are_noted_not_described_again(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (10, 20, 30, 40):
        _verl_ckpt(root, step)
    (root / "latest_checkpointed_iteration.txt").write_text("40")
    (root / "global_step_50").symlink_to(root / "global_step_40")  # a link is described, never taken as recorded
    everything = discover_checkpoints(tmp_path, with_size=False)
    resolved = root.resolve()
    # Nothing recorded: the same as a full scan.
    assert discover_new_checkpoints(tmp_path, {}) == (everything, set())
    # 10 and 20 recorded at their paths; 30 recorded at another path (the run dir moved): described again.
    known = {10: str(resolved / "global_step_10"), 20: str(resolved / "global_step_20"), 30: "/elsewhere/30",
             50: str(resolved / "global_step_50")}
    infos, present = discover_new_checkpoints(tmp_path, known)
    assert present == {10, 20}
    assert infos == [i for i in everything if i.step not in present]
    assert [i.step for i in infos] == [30, 40, 50]
    # A recorded folder that is gone is not present: the sync then flags it.
    shutil.rmtree(root / "global_step_20")
    assert discover_new_checkpoints(tmp_path, known)[1] == {10}


# -- samples ---------------------------------------------------------------------------------

def _verl_write_generations():
    """`RayPPOTrainer._write_generations`, taken from verl's source: importing ray_trainer needs
    GPU-side packages (cachetools via the rollout router) that this CPU venv does not carry."""
    import ast
    import os

    import verl

    src = Path(verl.__file__).parent / "trainer" / "ppo" / "ray_trainer.py"
    fn = next(n for n in ast.walk(ast.parse(src.read_text()))
              if isinstance(n, ast.FunctionDef) and n.name == "_write_generations")
    fn.decorator_list = []  # @staticmethod
    ns = {"os": os, "json": json, "np": np}
    exec(compile(ast.Module([fn], []), str(src), "exec"), ns)  # noqa: S102 - verl's own code
    return ns["_write_generations"]


def test_reads_samples_written_by_verls_dump(tmp_path):
    write_generations = _verl_write_generations()
    val = tmp_path / "samples" / "val"
    write_generations(["1+1="], ["2"], ["2"], [1.0], {"win": [1.0], "reference_score": [float("nan")]},
                                     str(val), 0)
    write_generations(["1+1=", "2+2="], ["3", "4"], ["2", "4"], [0.0, 1.0],
                                     {"win": [0.0, 0.5], "reference_score": [1.0, 1.0]}, str(val), 5)
    with (val / "5.jsonl").open("a") as fh:
        fh.write('{"input": "torn')
    assert sample_steps(tmp_path, "val") == [0, 5]
    rows = read_samples(tmp_path, "val")
    assert [(r["input"], r["output"], r["score"], r["step"], r["win"]) for r in rows] == [
        ("1+1=", "3", 0.0, 5, 0.0), ("2+2=", "4", 1.0, 5, 0.5)]
    assert math.isnan(read_samples(tmp_path, "val", step=0)[0]["reference_score"])
    assert read_samples(tmp_path, "rollout") == []
    with pytest.raises(ValueError):
        read_samples(tmp_path, "train")


def test_tied_group_share_from_verls_rollout_dump(tmp_path):
    """Three prompts, n=3, rows shuffled as balance_batch does: "a" ties at 1, "c" ties at 0, "b" differs."""
    write_generations = _verl_write_generations()
    rollout = tmp_path / "samples" / "rollout"
    inputs = ["a", "b", "c", "b", "a", "c", "c", "a", "b"]
    scores = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    write_generations(inputs, ["x"] * 9, [None] * 9, scores, {"acc": scores}, str(rollout), 4)
    assert rollout_groups(read_samples(tmp_path, "rollout", 4)) == [[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0] * 3]
    assert rollout_metrics(tmp_path, 4) == {"critic/zero_variance_group_share": pytest.approx(2 / 3),
                                            **dict.fromkeys(garbled.METRICS, 0.0)}
    assert rollout_metrics(tmp_path, 5) == {}  # no dump for that step


def test_garbled_output_shares_from_verls_rollout_dump(tmp_path):
    """VERL logs nothing about garbled text: the shares come from its rollout dump, as the local trainer logs them."""
    write_generations = _verl_write_generations()
    outputs = ["2 + 2 = 4", "loop " * 20, "caf\ufffd", "二加二等于四，这个问题很简单。"]
    write_generations(["What is 2 + 2?"] * 4, outputs, [None] * 4, [1.0, 0.0, 0.0, 0.0], {}, str(tmp_path / "samples"
                      / "rollout"), 3)
    m = rollout_metrics(tmp_path, 3)
    assert {k: m[k] for k in garbled.METRICS} == {garbled.REPETITION_SHARE: 0.25, garbled.ENCODING_SHARE: 0.25,
                                                  garbled.SCRIPT_SWITCH_SHARE: 0.25, garbled.GARBLED_SHARE: 0.75}


def test_rollout_groups_prefer_a_uid_and_skip_unusable_scores(tmp_path):
    rows = [{"uid": "u1", "input": "same", "score": 0.5}, {"uid": "u2", "input": "same", "score": 0.5},
            {"uid": "u1", "input": "same", "score": 0.5}, {"uid": "u2", "input": "same", "score": 0.7}]
    assert rollout_groups(rows) == [[0.5, 0.5], [0.5, 0.7]]
    path = tmp_path / "samples" / "rollout" / "1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"input": "a", "score": 1.0}\n{"input": "a", "score": "bad"}\n{"input": "b", "score": 1.0}\n'
                    '{"input": "b", "score": 0.0}\n{"input": "c", "sco')  # a torn last line, as mid-write
    assert rollout_metrics(tmp_path, 1)["critic/zero_variance_group_share"] == 0.0  # "a" has one usable score


def test_validation_wins_ties_losses_and_accuracy_from_verls_val_dump(tmp_path):
    """VERL logs only the mean of the reward's `win`; the counts and the accuracy come from its val dump."""
    from training.ingest import derived_metrics, validation_metrics

    write_generations = _verl_write_generations()
    val = tmp_path / "samples" / "val"
    # 1 of 4 answers right, the reference wrong on all: one win and three "both wrong" ties
    scores = [1.0, 0.0, 0.0, 0.0]
    write_generations(["1+1=", "1+2=", "1+3=", "1+4="], ["2", "9", "9", "9"], ["2", "3", "4", "5"], scores,
                      {"acc": scores, "win": [1.0, 0.5, 0.5, 0.5], "reference_score": [0.0] * 4}, str(val), 10)
    m = validation_metrics(tmp_path, 10)
    assert m["val-core/default/win_rate"] == pytest.approx(0.625)
    assert (m["val-core/default/win_rate_wins"], m["val-core/default/win_rate_ties"],
            m["val-core/default/win_rate_losses"]) == (1, 3, 0)
    assert m["val-core/default/accuracy"] == 0.25 and m["val-core/default/win_rate_n"] == 4
    assert validation_metrics(tmp_path, 11) == {}  # no dump at that step
    assert derived_metrics(tmp_path, 10) == m  # no rollout dump: only the validation part
