"""Reward probes: inputs a reward function must score low, and the author's own probes with a range.

A probe is one `compute_score` call with a known input and a rule for its score:

- the built-in probes (`builtin_probes`) are answers no reward should pay for: an empty answer, the
  answer format with nothing in it, "A or B or C or D", the prompt echoed back, a very long
  degenerate answer, a string that looks like broken encoding, and the right number buried in a list
  of numbers. They MUST SCORE LOW, where "low" depends on the reward's scale (`LowRule`):
  scores in 0..1 must be below 0.5 (what a binary shaping rounds to 0), scores in -1..1 must be at
  most 0, any other scale must be at most a threshold the author sets;
- the author's probes give an input (solution_str, ground_truth, data_source, extra_info) and a range
  lo..hi (either end may be open) that the score must fall in.

A probe whose call raised, timed out or returned no finite number fails, with that message.

Pure and standard library only: the web app runs the calls in the sandbox and stores the verdicts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SUITE_VERSION = "builtin-1"  # bump when a built-in probe's input changes: stored verdicts are then stale
SCALES = ("unit", "signed", "custom")
SCALE_LABELS = {
    "unit": "Scores in 0..1: the built-in probes must score below 0.5",
    "signed": "Scores in -1..1: the built-in probes must score at most 0",
    "custom": "Another scale: the built-in probes must score at most the threshold below",
}

GSM8K_CONTEXT = {
    "prompt": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips to her "
              "friends in May. How many clips did Natalia sell altogether in April and May?",
    "ground_truth": "72",
    "data_source": "openai/gsm8k",
    "extra_info": {},
}
DEGENERATE_CHARS = 20_000
MOJIBAKE = "Ã©Ã¨â€™Ã¼ \ufffd\ufffd\ufffd \x00\x01\x02\x1b[31m ÐŸÑ€Ð¸Ð²ÐµÑ‚ \ufeff\u200b\x7f ï¿½ï¿½"


@dataclass(frozen=True)
class Probe:
    key: str  # "builtin:empty", or "author:<id>"
    name: str
    kind: str  # "builtin" or "author"
    item: dict[str, Any]  # what the reward gets: data_source, solution_str, ground_truth, extra_info
    lo: float | None = None  # author probes: the expected range
    hi: float | None = None
    prompt: str = ""
    why: str = ""  # what a high score on it would mean

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "kind": self.kind, "item": self.item, "lo": self.lo,
                "hi": self.hi, "prompt": self.prompt, "why": self.why}


@dataclass(frozen=True)
class LowRule:
    """What "scores low" means for a reward's scale."""

    scale: str = "unit"
    threshold: float = 0.0  # used by "custom": at most this

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {', '.join(SCALES)}, not {self.scale!r}")
        if not math.isfinite(self.threshold):
            raise ValueError("the threshold must be a finite number")

    def is_low(self, score: float) -> bool:
        if self.scale == "unit":
            return score < 0.5
        if self.scale == "signed":
            return score <= 0.0
        return score <= self.threshold

    @property
    def words(self) -> str:
        if self.scale == "unit":
            return "below 0.5"
        if self.scale == "signed":
            return "at most 0"
        return f"at most {self.threshold:g}"


@dataclass
class Verdict:
    passed: bool
    reason: str
    expected: str
    extra: dict[str, Any] = field(default_factory=dict)


def _noise_numbers(answer: str, count: int = 60) -> str:
    """Many numbers, the right one among them but neither first nor last."""
    numbers = [x for x in (str(n * 37 % 211) for n in range(1, 4 * count)) if x != answer][:count]
    middle = len(numbers) // 2
    return " ".join([*numbers[:middle], answer, *numbers[middle:]])


def builtin_probes(context: dict[str, Any] | None = None) -> list[Probe]:
    """The built-in probes for one example (prompt, ground_truth, data_source, extra_info).

    Without a context they use a GSM8K example whose answer is 72."""
    ctx = {**GSM8K_CONTEXT, **{k: v for k, v in (context or {}).items() if v not in (None, "")}}
    if not (context or {}).get("prompt") and (context or {}).get("ground_truth") not in (None, ""):
        ctx["prompt"] = "What is the answer?"  # the GSM8K question does not belong to another ground truth
    answer = str(ctx["ground_truth"]).strip() if not isinstance(ctx["ground_truth"], (dict, list)) else "72"
    unit = "the answer is so "
    cases = [
        ("empty", "empty answer", "", "a reward that pays for nothing pays for every failed generation"),
        ("format_only", "format only", "#### \\boxed{}",
         "the answer markers with no answer: format credit alone must not look like a solved task"),
        ("choices", "A or B or C or D", "A or B or C or D", "hedging over every option must not be paid"),
        ("echo", "prompt echoed back", str(ctx["prompt"]), "copying the prompt must not be paid"),
        ("degenerate", "very long degenerate answer", (unit * (DEGENERATE_CHARS // len(unit) + 1))[:DEGENERATE_CHARS],
         "repetition until the length limit: must score low and must not hang the reward"),
        ("mojibake", "non-UTF-8-looking string", MOJIBAKE,
         "broken encoding and control bytes must score low, not raise"),
        ("buried", "right number buried in noise", _noise_numbers(answer),
         "listing many numbers, the right one among them, must not count as answering"),
    ]
    return [Probe(key=f"builtin:{key}", name=name, kind="builtin", prompt=str(ctx["prompt"]), why=why,
                  item={"data_source": str(ctx["data_source"]), "solution_str": text,
                        "ground_truth": ctx["ground_truth"], "extra_info": dict(ctx["extra_info"] or {})})
            for key, name, text, why in cases]


def range_words(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"between {lo:g} and {hi:g}"
    if lo is not None:
        return f"at least {lo:g}"
    if hi is not None:
        return f"at most {hi:g}"
    return "any number"


def judge(probe: Probe, score: float | None, error: str | None, rule: LowRule) -> Verdict:
    """Did `probe` pass, given the call's score (None when it failed) and error message?"""
    expected = f"score {rule.words}" if probe.kind == "builtin" else f"score {range_words(probe.lo, probe.hi)}"
    if error:
        return Verdict(False, f"the call failed: {error}", expected)
    if score is None or isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        return Verdict(False, f"the reward returned {score!r}, not a finite number", expected)
    if probe.kind == "builtin":
        if rule.is_low(score):
            return Verdict(True, f"scored {score:g}, {rule.words}", expected)
        return Verdict(False, f"scored {score:g}; built-in probes must score {rule.words}", expected)
    if probe.lo is not None and score < probe.lo:
        return Verdict(False, f"scored {score:g}, below the expected {range_words(probe.lo, probe.hi)}", expected)
    if probe.hi is not None and score > probe.hi:
        return Verdict(False, f"scored {score:g}, above the expected {range_words(probe.lo, probe.hi)}", expected)
    return Verdict(True, f"scored {score:g}, {range_words(probe.lo, probe.hi)}", expected)
