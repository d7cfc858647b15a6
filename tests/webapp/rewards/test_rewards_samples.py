from __future__ import annotations

import pytest

from webapp.rewards.samples import MAX_SAMPLES, SampleError, build_samples, clip, parse_responses

ROWS = [{"index": 0, "prompt_text": "1+2=", "chosen_text": "", "rejected_text": "", "ground_truth": "3",
         "data_source": "demo", "extra_info": {"k": 1}},
        {"index": 1, "prompt_text": "2+2=", "chosen_text": "", "rejected_text": "", "ground_truth": "4",
         "data_source": "demo", "extra_info": {}}]


def test_plain_lines_are_one_response_each_and_blank_lines_are_skipped():
    assert parse_responses("3\n\n 5 \r\n") == [{"response": "3"}, {"response": " 5 "}]


def test_json_list_of_strings_and_objects():
    got = parse_responses('["a", {"response": "b", "ground_truth": "7", "extra_info": {"x": 1}}]')
    assert got == [{"response": "a"}, {"response": "b", "ground_truth": "7", "extra_info": {"x": 1}}]


def test_json_lines_of_objects_accept_solution_str():
    got = parse_responses('{"solution_str": "x", "data_source": "openai/gsm8k"}\n{"response": "y"}')
    assert got == [{"response": "x", "data_source": "openai/gsm8k"}, {"response": "y"}]


@pytest.mark.parametrize("text, message", [
    ("", "at least one"),
    ("[1, 2", "not valid JSON"),
    ('{"a": 1}', "needs a \"response\""),
    ('[3]', "must be a string or an object"),
    ('{"response": "a", "extra_info": 3}', "extra_info"),
    ('{"response": "a"}\n{oops', "Line 2"),
])
def test_bad_pastes_get_a_clear_message(text, message):
    with pytest.raises(SampleError, match=message):
        parse_responses(text)


def test_too_many_responses_are_refused():
    with pytest.raises(SampleError, match=str(MAX_SAMPLES)):
        parse_responses("\n".join("x" for _ in range(MAX_SAMPLES + 1)))


def test_prompt_rows_score_the_ground_truth_without_a_reference():
    mode, samples = build_samples(rows=ROWS, kind="prompts")
    assert mode == "reference"
    assert [s.item for s in samples][0] == {"data_source": "demo", "solution_str": "3", "ground_truth": "3",
                                            "extra_info": {"k": 1}}
    assert [s.role for s in samples] == ["ground_truth", "ground_truth"]


def test_prompt_rows_with_a_reference_score_the_reference():
    rows = [dict(ROWS[0], chosen_text="The answer is 3")]
    _, samples = build_samples(rows=rows, kind="prompts")
    assert samples[0].item["solution_str"] == "The answer is 3" and samples[0].role == "reference"


def test_preference_rows_give_chosen_and_rejected():
    rows = [dict(ROWS[0], chosen_text="3", rejected_text="4")]
    mode, samples = build_samples(rows=rows, kind="preference")
    assert mode == "preference"
    assert [(s.role, s.item["solution_str"], s.item["ground_truth"]) for s in samples] == [
        ("chosen", "3", "3"), ("rejected", "4", "3")]


def test_responses_pair_with_rows_and_objects_override_fields():
    responses = [{"response": "3"}, {"response": "9", "ground_truth": "9"}]
    mode, samples = build_samples(rows=ROWS, kind="prompts", responses=responses)
    assert mode == "responses"
    assert [(s.item["solution_str"], s.item["ground_truth"], s.row_index) for s in samples] == [
        ("3", "3", 0), ("9", "9", 1)]


def test_more_responses_than_rows_is_an_error():
    with pytest.raises(SampleError, match="3 responses"):
        build_samples(rows=ROWS, kind="prompts", responses=[{"response": "x"}] * 3)


def test_responses_without_dataset_have_empty_ground_truth():
    _, samples = build_samples(rows=None, kind=None, responses=[{"response": "x"}])
    assert samples[0].item == {"data_source": "", "solution_str": "x", "ground_truth": "", "extra_info": {}}


def test_clip_says_how_much_was_cut():
    assert clip("abcdef", 4) == "abcd… [2 more characters]"
    assert clip("abc", 4) == "abc"


def test_clip_shows_nul_as_a_symbol_postgresql_can_store():
    from webapp.rewards.samples import clip

    assert clip("a\x00b") == "a\u2400b"
