"""The run directory module: paths, the atomic write, the JSONL reader, and the docs that show its layout."""
from __future__ import annotations

import gc
import json
import re
from pathlib import Path

import pytest

from training.rundir import (
    LAYOUT,
    RunDir,
    RunDirError,
    claim_run_dir,
    layout_text,
    read_jsonl,
    write_atomic,
    write_jsonl,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "run-directory.md"


def test_docs_show_the_layout_the_module_defines():
    blocks = re.findall(r"```\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert blocks and blocks[0] == layout_text(), "docs/run-directory.md: paste the output of python -m training.rundir"


def test_every_path_of_the_layout_has_a_home_in_rundir():
    run = RunDir("/r")
    attempt = run.attempt(3)
    assert {attempt.launch.name, attempt.supervisor_pid.name, attempt.heartbeat.name, attempt.log.name,
            attempt.metrics.name, attempt.cancel.name, attempt.lost.name, attempt.killed.name, attempt.exit.name,
            f"{attempt.stacks.name}/<unix>.txt", attempt.verl_overrides.name, attempt.verl_resolved.name,
            f"{attempt.hydra.name}/"} == \
        {p.strip() for p, _ in LAYOUT[[p for p, _ in LAYOUT].index("attempts/<K>/") + 1:
                                      [p for p, _ in LAYOUT].index("checkpoints/")] if p.strip()}
    assert attempt.path == Path("/r/attempts/3") and attempt.number == 3
    assert run.parquet("train") == Path("/r/data/train.parquet")
    assert run.export_step(4) == Path("/r/export/global_step_4")
    assert run.verl_reward_config == Path("/r/verl/reward.json")
    assert run.verl_reward_module == Path("/r/verl/reward_fn.py")
    assert run.samples("val", 7) == Path("/r/samples/val/7.jsonl") and run.data("val") == Path("/r/data/val.jsonl")
    with pytest.raises(RunDirError, match="attempt must be an integer >= 1"):
        run.attempt(0)
    with pytest.raises(RunDirError, match="kind must be"):
        run.samples_dir("train")


def test_attempts_are_listed_in_launch_order(tmp_path):
    for name in ("10", "2", "1", "notes", "0"):
        (tmp_path / "attempts" / name).mkdir(parents=True)
    assert [a.number for a in RunDir(tmp_path).attempts()] == [1, 2, 10]


def test_write_atomic_replaces_whole_files_and_leaves_no_temp(tmp_path):
    target = tmp_path / "deep" / "heartbeat"
    write_atomic(target, "one")
    write_atomic(target, b"two")
    assert target.read_text() == "two" and [p.name for p in target.parent.iterdir()] == ["heartbeat"]


def test_read_jsonl_skips_torn_lines_unless_strict(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [{"a": 1}, {"b": Path("x")}])
    with path.open("a") as fh:
        fh.write('[1]\n{"torn": ')
    assert read_jsonl(path) == [{"a": 1}, {"b": "x"}]
    with pytest.raises(RunDirError, match="rows.jsonl line 3 is not a JSON object"):
        read_jsonl(path, strict=True)
    assert read_jsonl(tmp_path / "missing.jsonl") == []
    with pytest.raises(RunDirError, match="data file not found"):
        read_jsonl(tmp_path / "missing.jsonl", strict=True)


def test_claimed_run_dirs_are_new_and_never_shared(tmp_path):
    first, second = claim_run_dir(tmp_path, "1"), claim_run_dir(tmp_path, "1")
    assert first.path != second.path and list(first.path.iterdir()) == []
    assert re.fullmatch(r"1-[0-9a-f]{12}", first.path.name)
    with pytest.raises(RunDirError, match="plain name"):
        claim_run_dir(tmp_path, "../1")


def test_the_documented_job_spec_is_one_the_backends_accept():
    from training.jobspec import SPEC_VERSION, JobSpec

    blocks = re.findall(r"```json\n(.*?)```", DOCS.read_text(), flags=re.S)
    spec = JobSpec.from_dict(json.loads(blocks[0]))
    assert spec.version == SPEC_VERSION and spec.reward.components[1].type == "model"
    assert JobSpec.from_dict(spec.to_dict()) == spec


def test_read_jsonl_gives_the_collector_back_as_it_found_it(tmp_path):
    # It pauses garbage collection while it parses; a bad line in a strict read must not leave it off.
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n[1]\n')
    assert gc.isenabled()
    assert read_jsonl(path) == [{"a": 1}]
    assert gc.isenabled()
    with pytest.raises(RunDirError):
        read_jsonl(path, strict=True)
    assert gc.isenabled()
    gc.disable()
    try:
        read_jsonl(path)
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_read_jsonl_reads_what_pythons_json_reads(tmp_path):
    """The fast parser where installed, Python's json for what it refuses (VERL's bare NaN) and for strict reads."""
    lines = ['{"score": NaN, "x": Infinity}', '{"big": 123456789012345678901234567890}',
             '{"text": "caf\\u00e9 \\ud83d\\ude00 \\u4e2d", "nested": {"a": [1, 2.5, null, true]}}', '{"e": 1e400}']
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert repr(read_jsonl(path, strict=True)) == repr([json.loads(line) for line in lines])
    loose = read_jsonl(path)  # a dump: the same, but an integer beyond 64 bits may come as a float
    assert repr(loose[:1] + loose[2:]) == repr([json.loads(line) for line in lines[:1] + lines[2:]])
    assert loose[1]["big"] == pytest.approx(123456789012345678901234567890)
