"""Pure functions over test-run scores and reward sources: summaries and line diffs."""
from __future__ import annotations

import difflib
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass


def normalize_source(source: str) -> str:
    """Browsers post textareas with CRLF; a version's text (and hash) uses LF only."""
    return source.replace("\r\n", "\n").replace("\r", "\n")


def source_sha256(source: str) -> str:
    return hashlib.sha256(normalize_source(source).encode("utf-8")).hexdigest()


def summarize(scores: Sequence[float | None]) -> dict:
    """Summary of one list of scores; None marks a sample that failed.

    `zero_share` is the share of exact zeros among the samples that got a score.
    `std` is the population standard deviation (what a GRPO group normalisation uses).
    """
    ok = [float(s) for s in scores if s is not None]
    out = {"n": len(scores), "scored": len(ok), "errors": len(scores) - len(ok),
           "mean": None, "std": None, "min": None, "max": None, "zero_share": None}
    if ok:
        mean = math.fsum(ok) / len(ok)
        out.update(mean=mean, std=math.sqrt(math.fsum((s - mean) ** 2 for s in ok) / len(ok)),
                   min=min(ok), max=max(ok), zero_share=sum(1 for s in ok if s == 0.0) / len(ok))
    return out


def pair_summary(chosen: Sequence[float | None], rejected: Sequence[float | None]) -> dict:
    """How often the reward ranks a preference pair the way the annotators did (pairs with two scores)."""
    pairs = [(c, r) for c, r in zip(chosen, rejected, strict=True) if c is not None and r is not None]
    higher = sum(1 for c, r in pairs if c > r)
    ties = sum(1 for c, r in pairs if c == r)
    return {"pairs": len(pairs), "chosen_higher": higher, "ties": ties,
            "rejected_higher": len(pairs) - higher - ties,
            "chosen_win_rate": higher / len(pairs) if pairs else None}


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "hunk", "same", "del", "add"
    old_no: int | None
    new_no: int | None
    text: str


def diff_lines(old: str, new: str, context: int = 3) -> list[DiffLine]:
    """A unified diff of two sources as rows with line numbers (text is escaped by the template)."""
    a, b = normalize_source(old).split("\n"), normalize_source(new).split("\n")
    out: list[DiffLine] = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        out.append(DiffLine("hunk", None, None,
                            f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(DiffLine("same", i + 1, j1 + (i - i1) + 1, a[i]) for i in range(i1, i2))
                continue
            if tag in ("replace", "delete"):
                out.extend(DiffLine("del", i + 1, None, a[i]) for i in range(i1, i2))
            if tag in ("replace", "insert"):
                out.extend(DiffLine("add", None, j + 1, b[j]) for j in range(j1, j2))
    return out


def diff_stats(lines: Sequence[DiffLine]) -> dict:
    return {"added": sum(1 for d in lines if d.kind == "add"), "removed": sum(1 for d in lines if d.kind == "del")}
