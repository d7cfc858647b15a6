"""Garbled-output metrics: repetition, broken encoding and script switches, per response and per step."""
from __future__ import annotations

import random

import pytest

from training import garbled
from training.garbled import (
    ENCODING_SHARE,
    GARBLED_SHARE,
    REPETITION_SHARE,
    SCRIPT_SWITCH_SHARE,
    garbled_metrics,
    has_broken_encoding,
    is_repetitive,
    max_ngram_repeats,
    switches_script,
)


def test_a_looping_response_is_repetitive_and_a_normal_one_is_not():
    loop = "The answer is 42 because we add the numbers. " * 4
    assert max_ngram_repeats(loop) == 4 and is_repetitive(loop)
    normal = ("First add 17 and 25 to get 42. Then check the sum by subtracting 25 from 42, which gives 17 again, "
              "so the answer is 42.")
    assert not is_repetitive(normal)
    assert not is_repetitive("42 42 42")  # too short to hold a long n-gram
    assert is_repetitive("的" * 30)  # scripts without spaces count characters


@pytest.mark.parametrize("vocab", [2, 3, 5, 16])
def test_is_repetitive_says_what_the_full_count_says(vocab):
    # The fast check skips positions whose half-length n-gram is too rare: on texts from small vocabularies (many
    # near-misses: n-grams seen twice, heads seen thrice) it must agree with counting every n-gram.
    rng = random.Random(vocab)
    words = [f"w{i}" for i in range(vocab)]
    agreed = {True: 0, False: 0}
    for _ in range(400):
        toks = [rng.choice(words) for _ in range(rng.randrange(0, 60))]
        if toks and rng.random() < 0.3:  # plant a repeated run
            run = toks[: rng.randrange(1, 10)]
            toks += run * rng.randrange(1, 4)
        text = " ".join(toks)
        for n, repeats in ((8, 3), (4, 2), (3, 3), (1, 4)):
            expected = max_ngram_repeats(text, n) >= repeats
            assert is_repetitive(text, n, repeats) is expected, (text, n, repeats)
            agreed[expected] += 1
    assert agreed[True] and agreed[False]  # both answers were exercised


def test_broken_encoding_is_a_replacement_character_or_bytes_that_are_not_utf8():
    assert has_broken_encoding("caf\ufffd au lait")
    assert has_broken_encoding(b"caf\xe9")  # latin-1 bytes: not UTF-8
    assert has_broken_encoding("x\udce9")  # what a surrogateescape decoder leaves for an undecodable byte
    assert not has_broken_encoding("café, 東京, Ünïcödé")
    assert not has_broken_encoding("café".encode())


def test_a_response_in_another_script_than_the_prompt_switches():
    assert switches_script("What is 2 + 2?", "2 + 2 equals 4.") is False
    assert switches_script("What is 2 + 2?", "答案是四。二加二等于四，这个很简单。")
    assert switches_script("Сколько будет два плюс два?", "Two plus two is four, obviously.")
    assert not switches_script("Сколько будет два плюс два?", "Два плюс два равно четырём.")
    assert not switches_script("123 + 456", "答案是五百七十九，这个很简单的。")  # no letters in the prompt: no verdict
    # a few foreign letters (a variable name, a unit) are not a switch
    assert not switches_script("日本の首都はどこですか？", "日本の首都は東京です。人口は約1400万人 (Tokyo)。")
    # chat-template markup is not the prompt's language
    templated = "<|im_start|>user\n二加二等于几？<|im_end|>\n<|im_start|>assistant\n"
    assert not switches_script(templated, "二加二等于四，这个问题很简单。")
    assert switches_script(templated, "Two plus two equals four, that is simple.")


def test_the_step_metrics_are_shares_of_responses():
    rows = [
        {"input": "What is 2 + 2?", "output": "2 + 2 = 4."},
        {"input": "What is 2 + 2?", "output": "four four four four four four four four four four four"},
        {"input": "What is 2 + 2?", "output": "It is \ufffd\ufffd 4"},
        {"input": "What is 2 + 2?", "output": "答案是四。二加二等于四，这个很简单。"},
    ]
    m = garbled_metrics(rows)
    assert m == {REPETITION_SHARE: 0.25, ENCODING_SHARE: 0.25, SCRIPT_SWITCH_SHARE: 0.25, GARBLED_SHARE: 0.75}
    assert garbled_metrics([]) == {}
    assert garbled_metrics([{"input": None, "output": None}])[GARBLED_SHARE] == 0.0


@pytest.mark.parametrize("name", garbled.METRICS)
def test_the_metric_names_are_under_one_prefix(name):
    assert name.startswith("garbled/")


@pytest.mark.parametrize("text", ["Plain ASCII: x = 3 + 4, so the answer is 7.", "", "1234 !?", "Ünïcödé mixed",
                                  "Привет world"])
def test_script_counts_of_ascii_text_are_those_of_the_general_count(text):
    general = garbled.Counter()
    for char in text:
        family = garbled.script_of(char)
        if family is not None:
            general[family] += 1
    assert garbled.script_counts(text) == general
