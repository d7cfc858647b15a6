"""Pinned rows -> VERL's RL parquet schema, loaded back with `datasets` as VERL's RLHFDataset does."""
from __future__ import annotations

import json

import pytest

from training.parquet import (
    DataFormatError,
    check_verl_schema,
    normalize_prompt,
    read_jsonl,
    to_verl_record,
    write_verl_parquet,
)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))


def _load(path):
    import datasets

    return datasets.load_dataset("parquet", data_files=str(path))["train"]


def test_grpo_rows_become_verl_records(tmp_path, hf_cache):
    rows = [
        {"prompt": "1+1=", "ground_truth": "2", "data_source": "arith", "ability": "math",
         "extra_info": {"level": 1}, "reference": "2"},
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2="}],
         "ground_truth": 4, "data_source": "arith", "extra_info": {"level": 2}},
    ]
    path = write_verl_parquet(rows, tmp_path / "train.parquet", "train")
    ds = _load(path)
    assert ds.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert check_verl_schema(path) == 2
    first, second = ds[0], ds[1]
    assert first["prompt"] == [{"role": "user", "content": "1+1="}]
    assert first["reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert first["extra_info"] == {"level": 1, "split": "train", "index": 0, "reference": "2"}
    assert second["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert second["reward_model"]["ground_truth"] == "4"  # one column type: strings
    assert second["ability"] == "general" and second["extra_info"]["index"] == 1


def test_preference_pairs_use_the_chosen_answer_as_ground_truth_and_reference(tmp_path, hf_cache):
    rows = [{"prompt": "Say hi", "chosen": [{"role": "user", "content": "Say hi"},
                                             {"role": "assistant", "content": "Hi!"}],
             "rejected": "Go away", "data_source": "prefs"}]
    rec = _load(write_verl_parquet(rows, tmp_path / "p.parquet", "val"))[0]
    assert rec["reward_model"]["ground_truth"] == "Hi!"
    assert rec["extra_info"]["reference"] == "Hi!" and rec["extra_info"]["split"] == "val"


def test_clashing_extra_info_types_still_write_one_schema(tmp_path, hf_cache):
    rows = [{"prompt": "a", "ground_truth": "1", "extra_info": {"tag": 1}},
            {"prompt": "b", "ground_truth": "2", "extra_info": {"tag": "two", "more": [1, 2]}}]
    ds = _load(write_verl_parquet(rows, tmp_path / "x.parquet", "train"))
    assert [r["extra_info"]["tag"] for r in ds] == ["1", "two"]
    assert ds[1]["extra_info"]["more"] == "[1, 2]" and ds[0]["extra_info"]["more"] is None


def test_prompt_messages_are_stored_for_reward_models(tmp_path, hf_cache):
    ds = _load(write_verl_parquet([{"prompt": "q", "ground_truth": "a"}], tmp_path / "r.parquet", "train",
                                  include_prompt_messages=True))
    assert json.loads(ds[0]["extra_info"]["prompt_messages"]) == [{"role": "user", "content": "q"}]


def test_reading_pinned_rows_names_the_bad_line(tmp_path):
    src = tmp_path / "train.jsonl"
    src.write_text('{"prompt": "ok", "ground_truth": "1"}\n{not json}\n')
    with pytest.raises(DataFormatError, match="train.jsonl line 2"):
        read_jsonl(src)


@pytest.mark.parametrize("row,message", [
    ({"prompt": ""}, "prompt is empty"),
    ({"prompt": [{"role": "user"}]}, "prompt\\[0\\]"),
    ({"prompt": 42}, "non-empty string or a list"),
    ({"prompt": "x", "extra_info": [1]}, "extra_info must be an object"),
    ({"prompt": "x", "data_source": 3}, "data_source must be a string"),
])
def test_bad_rows_get_messages_naming_the_row(row, message):
    with pytest.raises(DataFormatError, match=message):
        to_verl_record(row, "train", 7)


def test_an_empty_split_is_refused(tmp_path):
    with pytest.raises(DataFormatError, match="at least one prompt"):
        write_verl_parquet([], tmp_path / "e.parquet", "val")


def test_normalize_prompt_keeps_only_role_and_content():
    assert normalize_prompt([{"role": "user", "content": "x", "name": "bob"}]) == [{"role": "user", "content": "x"}]
