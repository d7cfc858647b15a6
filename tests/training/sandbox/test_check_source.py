"""check_source: syntax and signature problems found with ast, without running the user's code."""
from __future__ import annotations

import pytest

from training.sandbox import check_source
from training.sandbox.check import Problem

GOOD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 1.0\n"


def errors(source: str, name: str = "compute_score") -> list[Problem]:
    return [p for p in check_source(source, name) if p.severity == "error"]


def test_a_correct_reward_has_no_problems():
    assert check_source(GOOD) == []
    assert check_source(GOOD.replace("def ", "async def ")) == []


def test_it_never_executes_the_source(tmp_path):
    marker = tmp_path / "ran"
    src = f"open({str(marker)!r}, 'w').write('x')\n" + GOOD
    assert check_source(src) == []
    assert not marker.exists()


def test_a_syntax_error_is_reported_with_its_line():
    src = "import re\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
          "    return 1.0 if solution_str == ground_truth else\n"
    [problem] = check_source(src)
    assert problem.lineno == 4 and problem.message.startswith("SyntaxError")


def test_a_missing_function_is_reported():
    [problem] = check_source("def score(data_source, solution_str, ground_truth):\n    return 1.0\n")
    assert problem.lineno is None and "no top-level function named 'compute_score'" in problem.message
    assert check_source(GOOD.replace("compute_score", "my_reward"), name="my_reward") == []


def test_a_missing_parameter_is_reported():
    src = "def compute_score(data_source, ground_truth, extra_info=None):\n    return 1.0\n"
    [problem] = errors(src)
    assert problem.lineno == 1 and "'solution_str'" in problem.message and "by keyword" in problem.message


def test_a_function_that_does_not_accept_keywords_is_reported():
    src = "def compute_score(*args):\n    return 1.0\n"
    probs = errors(src)
    assert len(probs) == 4 and all("only takes *args" in p.message for p in probs)
    src = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, /):\n    return 1.0\n"
    assert {p.message.split("'")[1] for p in errors(src)} == {"data_source", "solution_str", "ground_truth",
                                                              "extra_info"}


def test_extra_required_parameters_are_errors_and_kwargs_covers_missing_names():
    src = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, tokenizer):\n    return 1\n"
    assert errors(src)[0].message.startswith("SyntaxError")  # non-default after default
    src = "def compute_score(data_source, solution_str, ground_truth, *, tokenizer, **kw):\n    return 1.0\n"
    [problem] = errors(src)
    assert "'tokenizer' has no default" in problem.message
    assert errors("def compute_score(solution_str, **kwargs):\n    return 1.0\n") == []


def test_fragile_signatures_get_warnings():
    src = "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 1.0\n"
    warnings = [p.message for p in check_source(src) if p.severity == "warning"]
    assert any("extra_info has no default" in w for w in warnings)
    assert any("no **kwargs" in w for w in warnings)
    assert errors(src) == []


def test_generators_and_functions_without_return_are_reported():
    src = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    yield 1.0\n"
    assert "generator" in errors(src)[0].message and errors(src)[0].lineno == 2
    src = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n" \
          "    score = 1.0\n    def helper():\n        return 2\n"
    assert "never returns a value" in errors(src)[0].message


@pytest.mark.parametrize("source", [
    "from verl.utils.reward_score import default_compute_score as compute_score\n",
    "import functools\n" + GOOD.replace("compute_score", "_impl") + "compute_score = functools.partial(_impl)\n",
    "try:\n    from fast import compute_score\nexcept ImportError:\n" + "\n".join(
        "    " + line for line in GOOD.splitlines()) + "\n",
])
def test_imports_and_assignments_are_accepted_unchecked(source):
    assert errors(source) == []


def test_the_last_definition_wins_and_classes_are_rejected():
    src = GOOD + "\ndef compute_score(x):\n    return 1.0\n"
    assert errors(src) and errors(src)[0].lineno == 4
    [problem] = check_source("class compute_score:\n    pass\n")
    assert "is a class" in problem.message
