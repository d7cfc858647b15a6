"""Rows with known quality problems, shared by the quality report's service, API, command and browser tests."""
from __future__ import annotations

import random

EVAL_QUESTION = ("A farmer has seventeen sheep and all but nine run away through a hole in the fence, "
                 "how many sheep does the farmer have left at the end of the day")
_VOCAB = ["river", "stone", "cloud", "garden", "lantern", "violin", "harbor", "meadow", "orbit", "pepper",
    "quilt", "saddle", "timber", "velvet", "walnut", "yarrow", "zephyr", "amber", "bishop", "canyon",
    "dolphin", "ember", "falcon", "glacier"]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_VOCAB) for _ in range(n))


def problem_pairs(clean: int = 8) -> list[dict]:
    """Preference pairs: 0 and 1 near-duplicates, 2 an exact copy of 0, 3 identical but for whitespace,
    4 contaminated by EVAL_QUESTION, 5 a multi-turn dialogue, 6 math, then `clean` unremarkable rows."""
    rng = random.Random(5)
    prompt = "Describe the " + _words(rng, 25)
    chosen, rejected = _words(rng, 30), _words(rng, 20)
    near = chosen.split()
    near[12] = "changed"
    rows = [
        {"prompt": prompt, "chosen": chosen, "rejected": rejected, "data_source": "web"},
        {"prompt": prompt, "chosen": " ".join(near), "rejected": rejected, "data_source": "web"},
        {"prompt": prompt, "chosen": chosen, "rejected": rejected, "data_source": "web"},
        {"prompt": "Explain what a harbor is", "chosen": "A harbor is  a sheltered\nbody of water.",
         "rejected": "A harbor is a sheltered body of water. ", "data_source": "web"},
        {"prompt": "Please answer: " + EVAL_QUESTION + "?", "chosen": "Nine", "rejected": "Eight",
         "data_source": "riddles"},
        {"prompt": "\n\nHuman: hi there\n\nAssistant: hello, how can I help?\n\nHuman: tell me about rivers",
         "chosen": "Rivers carry water to the sea.", "rejected": "No.", "data_source": "chat"},
        {"prompt": "What is 12 * 12?", "chosen": "144", "rejected": "124", "data_source": "arith"},
    ]
    for i in range(clean):
        rows.append({"prompt": f"Write a poem about the {_words(rng, 8)} number {i}", "chosen": _words(rng, 25),
                     "rejected": _words(rng, 15), "data_source": "poems"})
    return rows


def eval_prompts() -> list[dict]:
    return [{"prompt": EVAL_QUESTION, "ground_truth": "9"},
            {"prompt": "What is the boiling point of water at sea level in degrees Celsius?", "ground_truth": "100"}]
