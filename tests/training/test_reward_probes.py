"""The probe suite's pure part: the built-in inputs, the low rule per scale, and the verdict words."""
from __future__ import annotations

from training.reward_probes import LowRule, Probe, builtin_probes, judge


def test_builtin_probes_cover_the_issue_list_and_the_rule_words():
    keys = [p.key.split(":")[1] for p in builtin_probes()]
    assert keys == ["empty", "format_only", "choices", "echo", "degenerate", "mojibake", "buried"]
    items = {p.key: p.item["solution_str"] for p in builtin_probes()}
    assert items["builtin:empty"] == ""
    assert len(items["builtin:degenerate"]) >= 10_000
    buried = items["builtin:buried"].split()
    assert "72" in buried and buried[0] != "72" and buried[-1] != "72" and len(buried) > 20
    assert "\ufffd" in items["builtin:mojibake"] and "\x00" in items["builtin:mojibake"]
    empty = builtin_probes()[0]
    assert judge(empty, 0.5, None, LowRule("unit")).passed is False  # 0..1: below 0.5
    assert judge(empty, 0.49, None, LowRule("unit")).passed is True
    assert judge(empty, 0.0, None, LowRule("signed")).passed is True  # -1..1: at most 0
    assert judge(empty, 0.01, None, LowRule("signed")).passed is False
    assert judge(empty, 2.0, None, LowRule("custom", 2.0)).passed is True
    assert judge(empty, None, "ValueError: x", LowRule()).reason == "the call failed: ValueError: x"


def test_builtins_use_the_given_example_and_author_ranges_judge_both_ends():
    probes = builtin_probes({"ground_truth": "1200", "data_source": "mine"})
    assert all(p.item["ground_truth"] == "1200" and p.item["data_source"] == "mine" for p in probes)
    assert "1200" in probes[-1].item["solution_str"].split() and probes[3].item["solution_str"] != ""
    mine = Probe(key="author:1", name="mine", kind="author", item={}, lo=0.2, hi=0.8)
    assert judge(mine, 0.5, None, LowRule()).passed
    assert judge(mine, 0.9, None, LowRule()).reason == "scored 0.9, above the expected between 0.2 and 0.8"
    assert judge(mine, 0.1, None, LowRule()).reason == "scored 0.1, below the expected between 0.2 and 0.8"
    assert not judge(mine, float("nan"), None, LowRule()).passed
