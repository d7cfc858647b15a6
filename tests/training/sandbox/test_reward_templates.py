"""Every starter template runs in the sandbox and gives hand-computed scores on hand-written cases."""
from __future__ import annotations

import pytest

from training.reward_templates import ORDER, get_template, list_templates
from training.sandbox import RewardSandbox, check_source


def row(solution: str, gt: str, **extra: object) -> dict:
    return {"data_source": "test", "solution_str": solution, "ground_truth": gt, "extra_info": extra or None}


LONG = "x" * 600 + " #### 7"  # 607 chars
CASES = {
    "exact_match": [(row(" 42\n", "42"), 1.0), (row("42.", "42"), 0.0), (row("", ""), 1.0)],
    "gsm8k_exact": [
        (row("48 + 24 = 72\n#### 72", "72"), 1.0),
        (row("#### 1,200", "1200"), 1.0),
        (row("#### $18.", "18"), 1.0),
        (row("#### 72.0", "72"), 1.0),
        (row("#### 7 then #### 8", "7"), 0.0),  # the last answer counts
        (row("the answer is 72", "72"), 0.0),
        (row("#### -3", "-3"), 1.0),
    ],
    "gsm8k_verl": [  # VERL's own scorer, strict: the number right after '#### '
        (row("48 + 24 = 72\n#### 72", "72"), 1.0),
        (row("#### 1,200", "1200"), 1.0),
        (row("#### 72.0", "72"), 0.0),  # VERL compares the text: 72.0 is not 72
        (row("#### 7 then #### 8", "7"), 0.0),
        (row("the answer is 72", "72"), 0.0),
        (row("####72", "72"), 0.0),
        (row("x" * 400 + " #### -3", "-3"), 1.0),
    ],
    "gsm8k_format": [
        (row("3 + 4 = 7\n#### 7", "8"), 1.0),  # the format, right or wrong
        (row("#### ", "7"), 0.0),
        (row("the answer is 7", "7"), 0.0),
        (row("#### 7" + "y" * 400, "7"), 0.0),  # VERL only reads the last 300 characters
    ],
    "boxed_math": [
        (row("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"), 1.0),
        (row("\\boxed{0.5}", "\\dfrac{1}{2}"), 1.0),
        (row("\\boxed{1/2}", "0.5"), 1.0),
        (row("\\boxed{\\left( 3, 4 \\right)}", "(3,4)"), 1.0),
        (row("\\boxed{90^\\circ}", "90"), 1.0),
        (row("\\boxed{\\text{yes}}", "yes"), 1.0),
        (row("\\boxed{2} then \\boxed{3}", "2"), 0.0),
        (row("\\boxed{x^{2}}", "x^{2}"), 1.0),
        (row("no box, 5", "5"), 0.0),
    ],
    "format_regex": [
        (row("<think>add them</think>\n<answer>72</answer>", "72"), 1.0),
        (row("<answer>72</answer>", "72"), 0.0),
        (row("<think>a</think><answer>1</answer> trailing", "1"), 0.0),
        (row("ANSWER: 3", "3", format_pattern=r"ANSWER: \d+"), 1.0),
    ],
    "length_penalty": [
        (row("#### 7", "7"), 1.0),
        (row(LONG, "7"), 1.0 - 0.5 * (207 / 400)),
        (row("y" * 1000 + " #### 7", "7"), 0.5),  # overshoot capped at 1
        (row("#### 8", "7"), 0.0),
        (row("z" * 300 + "#### 7", "7", target_length=100), 0.5),
    ],
}

# combined: (1.0*correct + 0.2*format + 0.1*brevity) / 1.3
COMBINED = [
    (row("3 + 4 = 7\n#### 7", "7"), {"score": 1.0, "correct": 1.0, "format": 1.0, "brevity": 1.0}),
    (row("#### 7 I think", "7"), {"score": 1.1 / 1.3, "correct": 1.0, "format": 0.0, "brevity": 1.0}),
    (row("#### 8", "7"), {"score": 0.3 / 1.3, "correct": 0.0, "format": 1.0, "brevity": 1.0}),
    (row("a" * 594 + "#### 7", "7"), {"score": (1.0 + 0.2 + 0.1 * 0.5) / 1.3, "correct": 1.0, "format": 1.0,
                                     "brevity": 0.5}),
]


def test_list_templates_describes_every_template():
    templates = list_templates()
    assert [t["name"] for t in templates] == list(ORDER)
    for t in templates:
        assert set(t) == {"name", "title", "description", "source"}
        assert t["title"] and t["description"] and "def compute_score(" in t["source"]
        assert check_source(t["source"]) == []
    with pytest.raises(KeyError, match="known: exact_match"):
        get_template("nope")


@pytest.mark.parametrize("name", sorted(CASES))
def test_template_scores(name):
    rows, expected = zip(*CASES[name], strict=False)
    with RewardSandbox(get_template(name)) as sb:
        res = sb.score_batch(list(rows))
    assert [r.error for r in res] == [None] * len(rows)
    assert [r.score for r in res] == pytest.approx(list(expected))


def test_combined_returns_score_and_components():
    rows, expected = zip(*COMBINED, strict=False)
    with RewardSandbox(get_template("combined")) as sb:
        res = sb.score_batch(list(rows))
    for r, want in zip(res, expected, strict=False):
        assert r.error is None
        assert {"score": r.score, **r.extra} == pytest.approx(want)


def test_the_gsm8k_template_is_verls_scorer_strict_or_flexible():
    from verl.utils.reward_score import gsm8k

    texts = ["so 5 + 2 = 7 apples.", "#### 7", "7 apples, or 8", "it is 7.", "", "#### 7 and 9"]
    strict = get_template("gsm8k_verl")
    flexible = strict.replace('METHOD = "strict"', 'METHOD = "flexible"')
    assert flexible != strict
    for source, method in ((strict, "strict"), (flexible, "flexible")):
        with RewardSandbox(source) as sb:
            res = sb.score_batch([row(t, "7") for t in texts])
        assert [r.error for r in res] == [None] * len(texts)
        assert [r.score for r in res] == [float(gsm8k.compute_score(t, "7", method=method)) for t in texts]
    assert [r.score for r in res] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # flexible: the last number, "7." is not 7
