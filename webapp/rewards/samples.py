"""Pure helpers that turn dataset rows or pasted responses into sandbox items (no ORM, no I/O).

What a test-run scores (the choice is documented in docs and shown in the UI):
- prompt sets: the row's reference response (`chosen`) when it has one, else its ground truth,
  against the ground truth: a sanity check that the reward gives full marks to a right answer;
- preference sets: the chosen AND the rejected response of each row, each against the row's
  ground truth (usually "" for preference data); both scores are shown and compared;
- pasted responses: response i is scored against row i of the chosen dataset version (its ground
  truth, data source and extra_info), or against the fields given in the pasted JSON objects.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from webapp.core import jsonsafe

MAX_SAMPLES = 1000  # per test-run (a preference row counts once but is scored twice)
MAX_RESPONSES_CHARS = 2_000_000
KEEP_CHARS = 2000  # of each text shown in a stored result

RESPONSE_KEYS = ("response", "solution_str")
OVERRIDE_KEYS = ("ground_truth", "data_source", "extra_info")


class SampleError(ValueError):
    """Unusable pasted responses or sample choice; the message says what to fix."""


@dataclass
class Sample:
    item: dict[str, Any]  # what the sandbox gets: data_source, solution_str, ground_truth, extra_info
    role: str  # reference / ground_truth / chosen / rejected / response
    row_index: int | None = None
    prompt: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


def parse_responses(text: str) -> list[dict[str, Any]]:
    """Parse pasted responses: one per line, a JSON list, or JSON lines of objects.

    Returns [{"response": str, optional "ground_truth", "data_source", "extra_info"}].
    Text starting with "[" is read as a JSON list whose elements are strings or objects with
    "response" (or "solution_str"); text whose non-blank lines all start with "{" is read as JSON
    lines of such objects; anything else is one response per non-blank line.
    """
    if len(text) > MAX_RESPONSES_CHARS:
        raise SampleError(f"The pasted responses are longer than {MAX_RESPONSES_CHARS:,} characters.")
    stripped = text.strip()
    if not stripped:
        raise SampleError("Paste at least one response (one per line, or a JSON list).")
    if stripped.startswith("["):
        _refuse_deep(stripped)
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise SampleError(f"The pasted text starts with '[' but is not valid JSON: {exc.msg} "
                              f"(line {exc.lineno}, column {exc.colno}).") from None
        if not isinstance(data, list):
            raise SampleError("The pasted JSON must be a list of responses.")
        out = [_response(el, f"element {i + 1}") for i, el in enumerate(data)]
    else:
        lines = [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
        if all(line.lstrip().startswith("{") for _, line in lines):
            out = []
            for n, line in lines:
                _refuse_deep(line, f"Line {n}")
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SampleError(f"Line {n} starts with '{{' but is not valid JSON: {exc.msg}.") from None
                out.append(_response(obj, f"line {n}"))
        else:
            out = [{"response": line} for _, line in lines]
    if not out:
        raise SampleError("Paste at least one response (one per line, or a JSON list).")
    if len(out) > MAX_SAMPLES:
        raise SampleError(f"At most {MAX_SAMPLES} responses per test-run (you pasted {len(out)}).")
    return out


def _refuse_deep(text: str, what: str = "The pasted JSON") -> None:
    if jsonsafe.too_deep(text):
        raise SampleError(f"{what} is nested deeper than {jsonsafe.MAX_DEPTH} levels.")


def _response(el: Any, where: str) -> dict[str, Any]:
    if isinstance(el, str):
        return {"response": el}
    if not isinstance(el, dict):
        raise SampleError(f"{where.capitalize()} must be a string or an object with \"response\", "
                          f"not {type(el).__name__}.")
    key = next((k for k in RESPONSE_KEYS if k in el), None)
    if key is None or not isinstance(el[key], str):
        raise SampleError(f"{where.capitalize()} needs a \"response\" (or \"solution_str\") string.")
    out: dict[str, Any] = {"response": el[key]}
    for k in OVERRIDE_KEYS:
        if k in el:
            out[k] = el[k]
    if "extra_info" in out and not isinstance(out["extra_info"], dict):
        raise SampleError(f"{where.capitalize()}: \"extra_info\" must be an object.")
    if "data_source" in out and not isinstance(out["data_source"], str):
        raise SampleError(f"{where.capitalize()}: \"data_source\" must be a string.")
    return out


def _item(row: dict[str, Any] | None, solution: str, override: dict[str, Any] | None = None) -> dict[str, Any]:
    row = row or {}
    override = override or {}
    return {
        "data_source": override.get("data_source", row.get("data_source", "")),
        "solution_str": solution,
        "ground_truth": override.get("ground_truth", row.get("ground_truth", "")),
        "extra_info": override.get("extra_info", row.get("extra_info") or {}),
    }


def build_samples(*, rows: list[dict[str, Any]] | None, kind: str | None,
                  responses: list[dict[str, Any]] | None = None) -> tuple[str, list[Sample]]:
    """Return (mode, samples) for `rows` (dicts with index, prompt_text, chosen_text, rejected_text,
    ground_truth, data_source, extra_info) of a dataset of `kind`, or for pasted `responses`.

    `rows` is None when no dataset was chosen (pasted responses only)."""
    if responses is not None:
        if rows is not None and len(rows) < len(responses):
            raise SampleError(f"You pasted {len(responses)} responses but the chosen rows number only "
                              f"{len(rows)}; paste fewer responses or choose another split.")
        samples = []
        for i, resp in enumerate(responses):
            row = rows[i] if rows else None
            samples.append(Sample(item=_item(row, resp["response"], resp), role="response",
                                  row_index=row["index"] if row else None,
                                  prompt=(row or {}).get("prompt_text", "")))
        return "responses", samples
    if not rows:
        raise SampleError("The chosen dataset version has no rows in that split.")
    if kind == "preference":
        samples = []
        for row in rows:
            for role in ("chosen", "rejected"):
                samples.append(Sample(item=_item(row, row.get(f"{role}_text", "")), role=role,
                                      row_index=row["index"], prompt=row.get("prompt_text", "")))
        return "preference", samples
    samples = []
    for row in rows:
        reference = row.get("chosen_text") or ""
        role = "reference" if reference else "ground_truth"
        solution = reference or str(row.get("ground_truth", ""))
        samples.append(Sample(item=_item(row, solution), role=role, row_index=row["index"],
                              prompt=row.get("prompt_text", "")))
    return "reference", samples


def clip(text: Any, limit: int = KEEP_CHARS) -> str:
    """`text` as a string, cut to `limit` characters with a marker saying how much was cut.

    NUL characters are shown as ␀: PostgreSQL's text and JSON columns cannot hold them.
    """
    s = text if isinstance(text, str) else json.dumps(text, default=str)
    s = s.replace("\x00", "\u2400")
    if len(s) <= limit:
        return s
    return s[:limit] + f"… [{len(s) - limit:,} more characters]"
