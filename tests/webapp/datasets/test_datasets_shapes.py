"""Shape detection, column mapping and per-row validation (no database)."""
from __future__ import annotations

import pytest

from webapp.datasets.parsing import FileError
from webapp.datasets.shapes import RowError, detect_shape, normalize, parse_column_map, suggest_mapping
from webapp.datasets.splits import parse_split, val_count, val_indices

HH_CHOSEN = "\n\nHuman: Hi there\n\nAssistant: Hello!\n\nHuman: Tell me a joke\n\nAssistant: Why did the chicken…"
HH_REJECTED = "\n\nHuman: Hi there\n\nAssistant: Hello!\n\nHuman: Tell me a joke\n\nAssistant: No."


def shape_of(rows, column_map=None, kind=None):
    cols = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    return detect_shape(cols, rows, column_map, kind)


def norm(row, shape=None, max_chars=1000, **kw):
    return normalize(row, shape or shape_of([row], **kw), max_chars)


def test_trl_standard():
    row = {"prompt": "Q", "chosen": "good", "rejected": "bad", "id": 7}
    shape = shape_of([row])
    assert (shape.name, shape.kind) == ("trl_standard", "preference")
    out = norm(row, shape)
    assert (out.prompt, out.chosen, out.rejected) == ("Q", "good", "bad")
    assert out.extra_info == {"id": 7}  # an unknown column is kept, not dropped


def test_trl_conversational_with_explicit_prompt():
    row = {"prompt": [{"role": "user", "content": "Hi"}], "chosen": [{"role": "assistant", "content": "Hello"}],
           "rejected": [{"role": "assistant", "content": "Go away"}]}
    shape = shape_of([row])
    assert shape.name == "trl_conversational"
    out = norm(row, shape)
    assert out.prompt == row["prompt"] and out.chosen_text == "Hello"


def test_trl_conversational_without_prompt_splits_the_shared_prefix():
    system = {"role": "system", "content": "Be nice"}
    user = {"role": "user", "content": "Hi"}
    row = {"chosen": [system, user, {"role": "assistant", "content": "Hello"}],
           "rejected": [system, user, {"role": "assistant", "content": "Whatever"}]}
    out = norm(row)
    assert out.prompt == [system, user]
    assert out.chosen == [{"role": "assistant", "content": "Hello"}]
    assert out.rejected == [{"role": "assistant", "content": "Whatever"}]
    assert out.prompt_text == "system: Be nice\n\nuser: Hi"


def test_hh_rlhf_transcripts_become_prompt_and_final_responses():
    row = {"chosen": HH_CHOSEN, "rejected": HH_REJECTED}
    shape = shape_of([row])
    assert shape.name == "hh_rlhf"
    out = norm(row, shape)
    assert out.prompt.endswith("Tell me a joke\n\nAssistant:") and out.prompt.startswith("\n\nHuman: Hi there")
    assert out.chosen == " Why did the chicken…" and out.rejected == " No."


def test_hh_rlhf_pairs_that_differ_earlier_are_rejected():
    bad = {"chosen": HH_CHOSEN, "rejected": HH_REJECTED.replace("Hi there", "Hey")}
    with pytest.raises(RowError, match="differ before the last Assistant turn"):
        norm(bad, shape_of([{"chosen": HH_CHOSEN, "rejected": HH_REJECTED}]))


def test_verifiable_prompts_and_numbers_as_ground_truth():
    rows = [{"prompt": "1+1=", "ground_truth": 2, "data_source": "arith", "extra_info": {"k": 1}}]
    shape = shape_of(rows)
    assert (shape.name, shape.kind, shape.has_ground_truth) == ("prompts", "prompts", True)
    out = norm(rows[0], shape)
    assert (out.ground_truth, out.data_source, out.extra_info) == ("2", "arith", {"k": 1})


def test_verl_rows_read_reward_model_and_unwrap_a_single_user_turn():
    row = {"data_source": "gsm8k", "prompt": [{"role": "user", "content": "2+2?"}], "ability": "math",
           "reward_model": {"style": "rule", "ground_truth": "4"},
           "extra_info": {"split": "train", "index": 3, "answer": "4", "missing": None}}
    shape = shape_of([row])
    assert shape.name == "verl"
    out = norm(row, shape)
    assert (out.prompt, out.ground_truth, out.ability) == ("2+2?", "4", "math")
    assert out.extra_info == {"answer": "4"}  # VERL's split/index are regenerated on export


def test_mapping_columns_with_other_names():
    rows = [{"question": "What is 3+4?", "answer": "7", "src": "x"}]
    with pytest.raises(FileError) as exc:
        shape_of(rows)
    err = exc.value
    assert err.code == "needs_mapping"
    assert err.details["columns"] == ["question", "answer", "src"]
    assert err.details["suggested_map"] == {"prompt": "question", "ground_truth": "answer"}
    assert "prompt=question,ground_truth=answer" in err.message and "question, answer, src" in err.message
    assert err.details["preview"][0]["question"] == "What is 3+4?"
    shape = shape_of(rows, column_map={"prompt": "question", "ground_truth": "answer", "data_source": "src"})
    out = norm(rows[0], shape)
    assert (out.prompt, out.ground_truth, out.data_source, out.extra_info) == ("What is 3+4?", "7", "x", {})


def test_mapping_to_a_missing_column_or_unknown_field():
    with pytest.raises(FileError, match="'nope' is not in the file"):
        shape_of([{"a": 1}], column_map={"prompt": "nope"})
    with pytest.raises(FileError, match="Unknown field 'answer'"):
        shape_of([{"a": 1}], column_map={"answer": "a"})


def test_kind_forces_the_shape_and_leaves_other_columns_in_extra_info():
    row = {"prompt": "Q", "chosen": "A", "rejected": "B", "ground_truth": "A"}
    assert shape_of([row]).kind == "preference"
    shape = shape_of([row], kind="prompts")
    out = norm(row, shape)
    assert out.ground_truth == "A" and out.extra_info == {"chosen": "A", "rejected": "B"}
    with pytest.raises(FileError, match="need a chosen and a rejected column"):
        shape_of([{"prompt": "Q", "ground_truth": "1"}], kind="preference")


def test_strings_without_prompt_or_hh_turns_need_a_mapping():
    with pytest.raises(FileError, match="no prompt column"):
        shape_of([{"chosen": "a", "rejected": "b"}])


def test_csv_cells_with_json_messages_and_extra_info_are_decoded():
    row = {"prompt": '[{"role": "user", "content": "Hi"}]', "chosen": '[{"role": "assistant", "content": "A"}]',
           "rejected": '[{"role": "assistant", "content": "B"}]', "extra_info": '{"id": 3}'}
    shape = shape_of([row])
    assert shape.name == "trl_conversational"
    out = norm(row, shape)
    assert out.prompt == [{"role": "user", "content": "Hi"}] and out.extra_info == {"id": 3}


STD = {"prompt": "Q", "chosen": "A", "rejected": "B"}


@pytest.mark.parametrize("row,reason", [
    ({"prompt": "Q", "chosen": "A"}, "missing rejected"),
    ({"prompt": "Q", "chosen": "", "rejected": "B"}, "missing chosen"),
    ({"prompt": "   ", "chosen": "A", "rejected": "B"}, "prompt is empty"),
    ({"prompt": 12, "chosen": "A", "rejected": "B"},
     "prompt must be text or a list of {role, content} messages, got a number"),
    ({"prompt": "Q", "chosen": "A", "rejected": [{"role": "assistant", "content": "B"}]}, "must both be text or both"),
    ({"prompt": "Q", "chosen": [{"role": "assistant"}], "rejected": [{"role": "assistant", "content": "B"}]},
     "chosen[0] must be an object"),
    ({"prompt": "Q", "chosen": "same", "rejected": "same"}, "chosen is identical to rejected"),
    ({"prompt": "Q", "chosen": "A", "rejected": "B", "data_source": 5}, "data_source must be text, got a number"),
    ({"prompt": "Q", "chosen": "A", "rejected": "B", "extra_info": [1]}, "extra_info must be an object, got a list"),
    ({"prompt": "Q", "chosen": "A" * 1001, "rejected": "B"}, "chosen is 1,001 characters long; the limit is 1,000"),
    ({"prompt": "Q\x00", "chosen": "A", "rejected": "B"}, "NUL character"),
])
def test_row_errors_name_the_reason(row, reason):
    shape = shape_of([{**STD, "data_source": "s", "extra_info": {"a": 1}}])
    with pytest.raises(RowError) as exc:
        normalize(row, shape, 1000)
    assert reason in exc.value.reason


def test_prompt_row_errors():
    shape = shape_of([{"prompt": "Q", "ground_truth": "1"}])
    with pytest.raises(RowError, match="missing ground_truth"):
        normalize({"prompt": "Q"}, shape, 100)
    with pytest.raises(RowError, match="ground_truth is empty"):
        normalize({"prompt": "Q", "ground_truth": " "}, shape, 100)
    with pytest.raises(RowError, match="missing prompt"):
        normalize({"ground_truth": "1"}, shape, 100)


def test_row_hash_covers_the_pair_not_the_metadata():
    shape = shape_of([{**STD, "data_source": "a"}])
    a = normalize({**STD, "data_source": "a"}, shape, 100)
    b = normalize({**STD, "data_source": "b"}, shape, 100)
    c = normalize({**STD, "chosen": "A2"}, shape, 100)
    assert a.row_hash == b.row_hash != c.row_hash
    assert a.canonical != b.canonical  # the version's content hash does see the metadata


def test_file_split_column_is_validated():
    shape = shape_of([{**STD, "split": "train"}])
    assert normalize({**STD, "split": "validation"}, shape, 100).split == "val"
    with pytest.raises(RowError, match="split must be train or val"):
        normalize({**STD, "split": "holdout"}, shape, 100)


def test_parse_column_map():
    assert parse_column_map("prompt=question, ground_truth=answer") == {"prompt": "question", "ground_truth": "answer"}
    assert parse_column_map("") == {}
    with pytest.raises(ValueError, match="not FIELD=COLUMN"):
        parse_column_map("prompt")
    with pytest.raises(ValueError, match="Unknown field 'question'"):
        parse_column_map("question=prompt")


def test_suggest_mapping_uses_aliases_and_close_spellings():
    assert suggest_mapping(["Question", "final_answer", "promt_id"]) == {"prompt": "Question",
                                                                          "ground_truth": "final_answer"}
    assert suggest_mapping(["instruction", "preferred", "dispreferred"], "preference") == {
        "prompt": "instruction", "chosen": "preferred", "rejected": "dispreferred"}


def test_splits():
    assert parse_split("10%") == (10.0, None) and parse_split("200") == (None, 200)
    assert val_count("10%", 95) == 10 and val_count("0", 5) == 0 and val_count("50%", 1) == 0
    with pytest.raises(ValueError, match="asks for 200 validation rows but only 150"):
        val_count("200", 150)
    for bad in ("abc", "100%", "-1", "2.5"):
        with pytest.raises(ValueError):
            parse_split(bad)
    a = val_indices(1000, 100, seed=3)
    assert a == val_indices(1000, 100, seed=3) != val_indices(1000, 100, seed=4)
    assert len(set(a)) == 100 and a == sorted(a)
