"""The length pre-flight's rules (pure): counted with the model's tokenizer as the trainers render prompts;
every prompt too long refuses, a share above the user's threshold warns, a sample stands for a big set."""
from __future__ import annotations

from training import length_preflight as lp

LIMITS = {"max_prompt_length": 8, "max_response_length": 4, "max_seq_len": 16}


class Words:
    """A tokenizer whose tokens are words, with a chat template that adds two tokens per turn."""

    chat_template = "{% for m in messages %}<{{ m.role }}> {{ m.content }} {% endfor %}<assistant>"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "".join(f"<{m['role']}> {m['content']} " for m in messages) + "<assistant>"

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [t.split() for t in texts]}


def test_prompts_are_counted_through_the_chat_template_as_the_trainers_feed_them():
    assert lp.prompt_lengths(["a b c", [{"role": "user", "content": "a b"}]], Words()) == [5, 4]
    assert lp.char_lengths(["abc", [{"role": "user", "content": "ab"}]]) == [3, 2]


def test_a_share_above_the_threshold_warns_and_says_how_to_keep_them():
    s = lp.summarize([4] * 18 + [9, 12], n_rows=20, limits=LIMITS)
    assert (s["over"], s["share"], s["max"], s["median"], s["all_over"]) == (2, 0.1, 12, 4, False)
    errors, warnings = {}, {}
    lp.check(s, 0.05, errors, warnings)
    assert errors == {}
    assert warnings["max_prompt_length"] == ("2 of 20 prompts (10.0%) are longer than the max prompt length 8 tokens: "
                                             "both backends leave them out of training. Raise it to 12 to keep "
                                             "them all.")
    warnings = {}
    lp.check(s, 0.2, errors, warnings)  # the user's threshold is above the share
    assert warnings == {} and errors == {}


def test_every_prompt_too_long_refuses_the_launch():
    errors, warnings = {}, {}
    lp.check(lp.summarize([9, 10, 30], n_rows=3, limits=LIMITS), 0.05, errors, warnings)
    assert "Every prompt is longer than the max prompt length 8 (the shortest is 9 tokens)" in \
        errors["max_prompt_length"]
    errors = {}
    lp.check(lp.summarize([9, 10, 30], n_rows=3, limits=LIMITS, unit="characters"), 0.05, errors, warnings)
    assert errors == {} and "counted in characters" in warnings["max_prompt_length"]  # no tokenizer: only a warning


def test_the_response_budget_and_the_models_context():
    s = lp.summarize([3, 6], n_rows=2, limits=LIMITS, context=9)
    assert (s["longest_sequence"], s["response_room"]) == (10, 4)
    errors, warnings = {}, {}
    lp.check(s, 0.05, errors, warnings)
    assert "more than the model's context of 9" in warnings["max_seq_len"]


def test_a_large_set_is_sampled_evenly_and_counts_are_scaled():
    idx = lp.sample_indices(100_000, limit=1000)
    assert len(idx) == 1000 and idx[0] == 0 and idx[-1] == 99_900 and idx == sorted(set(idx))
    s = lp.summarize([4] * 900 + [20] * 100, n_rows=100_000, limits=LIMITS)
    assert s["sampled"] and s["over"] == 10_000
    warnings = {}
    lp.check(s, 0.05, {}, warnings)
    assert warnings["max_prompt_length"].startswith("about 10,000 of 100,000 prompts (10.0%)")
