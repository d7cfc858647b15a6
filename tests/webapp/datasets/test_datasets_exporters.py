"""Exports, and the round trip: export then re-import gives the same rows."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from webapp.core.services import ApplicationError
from webapp.datasets.exporters import export_version, trl_record
from webapp.datasets.models import DatasetRow
from webapp.datasets.services import dataset_import

pytestmark = pytest.mark.django_db

FIELDS = ("prompt", "chosen", "rejected", "ground_truth", "data_source", "ability", "extra_info", "split")


def rows_of(version):
    return [tuple(getattr(r, f) for f in FIELDS) for r in DatasetRow.objects.filter(version=version).order_by("index")]


def imported(project, user, path, name, **kw):
    return dataset_import(project=project, user=user, name=name, path=path, **kw)


CONVERSATIONAL = [
    {"prompt": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": f"q{i}"}],
     "chosen": [{"role": "assistant", "content": f"good {i}"}], "rejected": [{"role": "assistant", "content": "bad"}],
     "data_source": "chat", "extra_info": {"id": i}}
    for i in range(6)
]


@pytest.mark.parametrize("fmt", ["jsonl", "trl"])
@pytest.mark.parametrize("source", ["standard", "conversational"])
def test_preference_round_trip(project, engineer, write, tmp_path, pairs, fmt, source):
    rows = pairs if source == "standard" else CONVERSATIONAL
    original = imported(project, engineer, write("in.jsonl", rows), "orig", split="2", split_seed=5)
    out = tmp_path / f"out.{fmt}.jsonl"
    result = export_version(version=original, fmt=fmt, out_path=out, user=engineer)
    assert result.rows == len(rows)
    again = imported(project, engineer, out, "again", split="2", split_seed=5)
    assert rows_of(again) == rows_of(original)
    assert again.content_hash == original.content_hash


def test_prompts_round_trip_through_verl_parquet(project, engineer, write, tmp_path, prompt_rows):
    from training.parquet import check_verl_schema

    original = imported(project, engineer, write("p.jsonl", prompt_rows), "orig", split="1", split_seed=2)
    out = tmp_path / "verl.parquet"
    export_version(version=original, fmt="verl", out_path=out)
    table = pq.read_table(out).to_pylist()
    assert table[0] == {"data_source": "arith", "prompt": [{"role": "user", "content": "1+1="}], "ability": "math",
                        "reward_model": {"style": "rule", "ground_truth": "2"},
                        "extra_info": {"split": table[0]["extra_info"]["split"], "index": 0, "level": 1}}
    assert sorted(r["extra_info"]["split"] for r in table) == ["train", "train", "val"]
    assert check_verl_schema(out) == 3  # loads the way VERL's RLHFDataset does
    again = imported(project, engineer, out, "again", split="1", split_seed=2)
    assert again.detected_shape == "verl" and rows_of(again) == rows_of(original)


def test_verl_export_of_mixed_extra_info_types(project, engineer, write, tmp_path):
    rows = [{"prompt": "a", "ground_truth": "1", "extra_info": {"k": 1, "tags": ["x"], "w": 1}},
            {"prompt": "b", "ground_truth": "2", "extra_info": {"k": "one", "w": 2.5}}]
    version = imported(project, engineer, write("m.jsonl", rows), "mixed", split="0")
    out = tmp_path / "m.parquet"
    export_version(version=version, fmt="verl", out_path=out)
    extra = [r["extra_info"] for r in pq.read_table(out).to_pylist()]
    assert extra[0]["k"] == "1" and extra[1]["k"] == '"one"'  # clashing types fall back to JSON text
    assert extra[0]["tags"] == '["x"]' and extra[1]["tags"] is None
    assert (extra[0]["w"], extra[1]["w"]) == (1.0, 2.5)


def test_verl_export_of_preference_pairs_uses_chosen_as_reference(project, engineer, write, tmp_path, pairs):
    version = imported(project, engineer, write("p.jsonl", pairs), "prefs", split="0")
    out = tmp_path / "p.parquet"
    export_version(version=version, fmt="verl", out_path=out)
    first = pq.read_table(out).to_pylist()[0]
    assert first["reward_model"]["ground_truth"] == "4" and first["extra_info"]["reference"] == "4"


def test_trl_styles():
    row = {"prompt": "Q", "chosen": "A", "rejected": "B", "data_source": "", "extra_info": {}}
    assert trl_record(row, "preference") == {"prompt": "Q", "chosen": "A", "rejected": "B"}
    assert trl_record(row, "preference", "conversational") == {
        "prompt": [{"role": "user", "content": "Q"}], "chosen": [{"role": "assistant", "content": "A"}],
        "rejected": [{"role": "assistant", "content": "B"}]}
    conv = {"prompt": [{"role": "user", "content": "Q"}], "chosen": [{"role": "assistant", "content": "A"}],
            "rejected": [{"role": "assistant", "content": "B"}], "data_source": "s"}
    assert trl_record(conv, "preference", "standard") == {"prompt": "Q", "chosen": "A", "rejected": "B",
                                                          "data_source": "s"}


def test_unknown_format_is_refused(project, engineer, write, tmp_path, pairs):
    version = imported(project, engineer, write("p.jsonl", pairs), "prefs")
    with pytest.raises(ApplicationError, match="Unknown format"):
        export_version(version=version, fmt="csv", out_path=tmp_path / "x")


