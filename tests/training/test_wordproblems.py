"""The generated GSM8K-format word problems: seeded, varied, correct, in VERL's schema, scored by VERL's scorer."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from training import parquet, wordproblems


@pytest.fixture(scope="module")
def problems():
    return wordproblems.generate(2000, 200, seed=0)


def test_two_thousand_train_and_two_hundred_new_validation_problems(problems):
    train, val = problems
    assert (len(train), len(val)) == (2000, 200)
    questions = [r["extra_info"]["question"] for r in train + val]
    assert len(set(questions)) == 2200  # no duplicate, and no validation question is also a training one
    assert [r["extra_info"]["index"] for r in val] == list(range(200))
    assert {r["split"] for r in train} == {"train"} and {r["split"] for r in val} == {"val"}


def test_the_same_seed_gives_the_same_problems_and_another_seed_others(problems):
    again = wordproblems.generate(2000, 200, seed=0)
    assert again == problems
    other, _ = wordproblems.generate(2000, 200, seed=1)
    assert sum(a["prompt"] == b["prompt"] for a, b in zip(other, problems[0], strict=True)) < 20


def test_every_operation_and_several_phrasings_of_each(problems):
    train, _ = problems
    families = Counter(r["extra_info"]["family"] for r in train)
    assert set(families) == set(wordproblems.FAMILIES) and min(families.values()) >= 200
    assert {r["extra_info"]["operations"] for r in train} >= {"+", "-", "*", "/", "+-", "*+", "*-", "/+"}
    for family in wordproblems.FAMILIES:  # at least two sentence shapes per family (names and numbers stripped)
        shapes = {re.sub(r"\$?\d+|[A-Z][a-z]+", "_", r["extra_info"]["question"].split(".")[0])
                  for r in train if r["extra_info"]["family"] == family}
        assert len(shapes) >= 2, family


def test_the_worked_answers_are_right_and_end_in_gsm8k_format(problems):
    train, val = problems
    for row in train + val:
        answer = row["extra_info"]["answer"]
        *reasoning, last = answer.split("\n")
        assert last == f"#### {row['ground_truth']}"
        value = None
        for a, op, b, c in re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)\.", reasoning[0]):
            got = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b), "/": int(a) / int(b)}[op]
            assert got == int(c), answer
            value = int(c)
        assert value == int(row["ground_truth"]) >= 0
        content = row["prompt"][0]["content"]
        assert content.endswith(wordproblems.INSTRUCTION) and row["prompt"][0]["role"] == "user"


def test_files_in_verl_schema_scored_by_verls_own_gsm8k_scorer(tmp_path):
    from verl.utils.reward_score import default_compute_score

    paths = wordproblems.write(tmp_path, n_train=40, n_val=10, seed=3)
    assert parquet.check_verl_schema(paths["train"]) == 40
    assert parquet.check_verl_schema(paths["val"]) == 10
    import pyarrow.parquet as pq

    records = pq.read_table(paths["train"]).to_pylist()
    assert {r["data_source"] for r in records} == {"openai/gsm8k"}
    for rec in records:  # VERL dispatches on data_source: the worked answer scores 1, a wrong one 0
        truth = rec["reward_model"]["ground_truth"]
        assert default_compute_score(rec["data_source"], rec["extra_info"]["answer"], truth) == 1.0
        assert default_compute_score(rec["data_source"], f"#### {int(truth) + 1}", truth) == 0.0
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == 50
