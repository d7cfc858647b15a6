"""Automatic judges: answer parsing, both orders judged, scalar scorers, a judge model's position bias."""
from __future__ import annotations

import json
import sys
import types

import pytest

from training import judges
from training.demo import EXACT_MATCH_SOURCE
from training.models import build_tiny_reward_model

PAIRS = [
    {"id": 0, "prompt": "1+1=", "a": "2", "b": "3", "ground_truth": "2"},   # the policy is right
    {"id": 1, "prompt": "2+2=", "a": "5", "b": "4", "ground_truth": "4"},   # the opponent is right
    {"id": 2, "prompt": "3+3=", "a": "6", "b": "6", "ground_truth": "6"},   # both right: a tie
    {"id": 3, "prompt": "4+4=", "a": "1", "b": "2", "ground_truth": "8"},   # both wrong: a tie, not a win
]


@pytest.mark.parametrize("text, choice", [
    ("A", "A"), ("B.", "B"), (" (B)", "B"), ("[[A]]", "A"), ("[[C]]", "tie"), ("Answer: B", "B"),
    ("answer: a", "A"), ("The better response is A.", "A"), ("Response B is better because it is right.", "B"),
    ("B\nResponse B gives the sum.", "B"), ("I prefer B", "B"), ("It's a tie.", "tie"),
    ("A or B?", None), ("", None), ("qz!x", None), ("A good answer would be short", None),
    ("Answer: A. No wait, answer: B", None),
])
def test_parse_choice(text, choice):
    assert judges.parse_choice(text) == choice


def test_choice_outcome_is_from_the_policy_side():
    assert judges.choice_outcome("A", "A") == 1.0 and judges.choice_outcome("A", "B") == 0.0
    assert judges.choice_outcome("tie", "B") == 0.5 and judges.choice_outcome(None, "A") is None


def test_reward_function_judge_in_the_sandbox(tmp_path):
    (tmp_path / "reward").mkdir()
    (tmp_path / "reward" / "exact.py").write_text(EXACT_MATCH_SOURCE)
    judge = {"kind": "reward", "run_dir": str(tmp_path),
             "reward": {"shaping": "raw", "components": [{"type": "function", "path": "reward/exact.py"}]}}
    result = judges.judge_pairs(PAIRS, judge, resamples=200)
    s = result["summary"]
    assert (s["wins"], s["ties"], s["losses"], s["n"]) == (1, 2, 1, 4)
    assert s["win_rate"] == pytest.approx(0.5) and s["lo"] <= 0.5 <= s["hi"]
    first = result["pairs"][0]
    assert first["first"]["scores"] == {"A": 1.0, "B": 0.0} and first["second"]["scores"] == {"A": 0.0, "B": 1.0}
    assert all(p["consistent"] for p in result["pairs"]) and s["position_bias_share"] == 0.0
    assert "reward" not in result["judge"]  # the reward block stays in the run directory


def test_reward_model_judge_records_both_orders(tmp_path):
    rm = build_tiny_reward_model(tmp_path / "rm", vocab="0123456789+= ", hidden=32, layers=1)
    result = judges.judge_pairs(PAIRS, {"kind": "reward_model", "path": str(rm)}, resamples=200)
    s = result["summary"]
    assert s["n"] == 4 and s["wins"] + s["ties"] + s["losses"] == 4 and s["inconsistent"] == 0
    tie = result["pairs"][2]  # identical responses score the same: a tie in both orders
    assert tie["outcome"] == 0.5 and tie["first"]["scores"]["A"] == pytest.approx(tie["first"]["scores"]["B"])
    for p in result["pairs"]:
        assert p["first"]["scores"]["A"] == p["second"]["scores"]["B"]


def _fake_generation(monkeypatch, answer_for):
    """A stand-in training.generation whose model answers by the prompt it is shown."""
    gen_mod = types.ModuleType("training.generation")

    class Gen:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def generate(self, prompts, **kw):
            return [[types.SimpleNamespace(text=answer_for(p))] for p in prompts]

    gen_mod.load_generator = lambda path, **kw: Gen()
    gen_mod.GenerationError = ValueError
    monkeypatch.setitem(sys.modules, "training.generation", gen_mod)


def test_a_judge_model_that_always_says_a_is_all_position_bias(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    _fake_generation(monkeypatch, lambda p: "A")
    s = judges.judge_pairs(PAIRS, {"kind": "judge_model", "path": str(tmp_path)})["summary"]
    assert (s["wins"], s["ties"], s["losses"]) == (0, 4, 0)
    assert s["inconsistent"] == 4 and s["position_bias_share"] == 1.0 and s["first_position"] == 4


def test_a_consistent_judge_model(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")

    def right_one(prompt):  # picks the response that equals the true sum, whichever position it is in
        body = prompt.split("[Prompt]\n")[1]
        q, a, b = body.split("\n\n[Response A]\n")[0], body.split("[Response A]\n")[1].split("\n")[0], \
            body.split("[Response B]\n")[1].split("\n")[0]
        truth = str(eval(q.rstrip("=")))  # noqa: S307 - the test's own arithmetic
        return "tie" if a == b else ("Answer: A" if a == truth else "Answer: B" if b == truth else "[[C]]")

    _fake_generation(monkeypatch, right_one)
    result = judges.judge_pairs(PAIRS, {"kind": "judge_model", "path": str(tmp_path)}, resamples=200)
    s = result["summary"]
    assert (s["wins"], s["ties"], s["losses"], s["inconsistent"]) == (1, 2, 1, 0)
    assert result["pairs"][0]["second"]["answer"] == "Answer: B"  # swapped: the policy's "2" was shown as B


def test_bad_requests_are_refused(tmp_path):
    with pytest.raises(judges.JudgeError, match="no pairs"):
        judges.judge_pairs([], {"kind": "reward_model", "path": str(tmp_path)})
    with pytest.raises(judges.JudgeError, match="judge kind"):
        judges.judge_pairs(PAIRS, {"kind": "oracle"})
    with pytest.raises(judges.JudgeError, match="not an HF model folder"):
        judges.judge_pairs(PAIRS, {"kind": "reward_model", "path": str(tmp_path)})
    with pytest.raises(judges.JudgeError, match="has no text 'b'"):
        judges.judge_pairs([{"prompt": "x", "a": "y"}], {"kind": "reward_model", "path": str(tmp_path)})


def test_cli_writes_the_result_and_refuses_with_exit_2(tmp_path, capsys):
    rm = build_tiny_reward_model(tmp_path / "rm", vocab="0123456789+= ", hidden=32, layers=1)
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    (tmp_path / "judge.json").write_text(json.dumps({"kind": "reward_model", "path": str(rm)}))
    args = ["--pairs", str(tmp_path / "pairs.jsonl"), "--judge", str(tmp_path / "judge.json"),
            "--out", str(tmp_path / "out.json"), "--resamples", "100"]
    assert judges.main(args) == 0
    assert json.loads((tmp_path / "out.json").read_text())["summary"]["pairs"] == 4
    (tmp_path / "judge.json").write_text(json.dumps({"kind": "oracle"}))
    assert judges.main(args) == 2 and "judge kind" in capsys.readouterr().err


def test_a_judge_model_on_the_tiny_demo_model_runs_both_orders(tmp_path):
    """The real generator on the demo model: its answers are parsed (mostly into nothing: it is random)
    and each pair is asked twice, the policy shown first and then second."""
    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_model

    model = build_tiny_model(tmp_path / "judge", vocab=DEMO_VOCAB + "AB", hidden=32, layers=1, max_positions=512)
    result = judges.judge_pairs(PAIRS, {"kind": "judge_model", "path": str(model), "max_response_length": 3},
                                resamples=100)
    assert len(result["pairs"]) == 4
    for p in result["pairs"]:
        assert (p["first"]["policy_position"], p["second"]["policy_position"]) == ("A", "B")
        for order in (p["first"], p["second"]):
            assert isinstance(order["answer"], str)
            assert order["choice"] == judges.parse_choice(order["answer"])
            assert order["outcome"] == judges.choice_outcome(order["choice"], order["policy_position"])
    s = result["summary"]
    assert s["n"] + s["unjudged"] == 4 and s["wins"] + s["ties"] + s["losses"] == s["n"]
