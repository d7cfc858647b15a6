"""Reads for the sample browser: a run's validation samples and rollout store, step by step and prompt by prompt.

Bounded for large runs: a step's dump is streamed once into a small index (offsets and the numbers the
filters need, never the text), kept in an LRU of INDEX_CACHE steps and rebuilt when the file changes;
a page then reads only the lines it shows (`training.ingest.read_sample_at`). A prompt's view across
steps indexes at most SCAN_BUDGET step files per request and shows at most MAX_COLUMNS steps, with a
link to continue. Rows follow the rollout-store contract (`training.rollouts`); VERL dumps are
normalised the same way (groups from the prompt text, advantages by GRPO's maths).
"""
from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from training import ingest, rollouts

KINDS = {"val": "Validation", "rollout": "Training rollouts"}
PER_PAGE = 20
MAX_COLUMNS = 6
SAMPLES_PER_COLUMN = 4
SCAN_BUDGET = 40
INDEX_CACHE = 64
TIE_EPS = 1e-9
PROMPT_HEAD = 200  # characters of each distinct prompt the index keeps, for "prompt contains"
_TEXT_KEYS = ("output", "reference", "gts", "token_advantage", *rollouts.TOKEN_KEYS)


def prompt_key(text: Any) -> str:
    """A short stable key of a prompt's text: the same prompt has the same key at every step."""
    return hashlib.sha1(str(text).encode("utf-8", "replace")).hexdigest()[:12]


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class Entry:
    offset: int
    prompt: str
    uid: str
    sample_index: int
    score: float | None
    components: tuple[tuple[str, float | None], ...]
    error: bool
    advantage: float | None
    length: int | None
    truncated: bool | None
    tokens: bool


@dataclass
class StepIndex:
    step: int
    entries: list[Entry]
    by_prompt: dict[str, list[int]] = field(default_factory=dict)
    by_uid: dict[str, list[int]] = field(default_factory=dict)
    components: list[str] = field(default_factory=list)
    prompt_heads: dict[str, str] = field(default_factory=dict)  # prompt key -> its first PROMPT_HEAD characters


_cache: OrderedDict[tuple, StepIndex] = OrderedDict()
_lock = threading.Lock()


def _light(row: dict[str, Any]) -> dict[str, Any]:
    """A row without its texts (the index keeps only what filters and grouping need)."""
    out = {k: v for k, v in row.items() if k not in _TEXT_KEYS}
    out["input"] = prompt_key(row.get("input"))
    out["_head"] = str(row.get("input") or "")[:PROMPT_HEAD]
    out["_tokens"] = isinstance(row.get("token_logratio"), list) and bool(row.get("token_logratio"))
    return out


def _entry(offset: int, row: dict[str, Any], kind: str) -> Entry:
    comps = row.get("components") if kind == "rollout" else None
    errors = row.get("errors") if kind == "rollout" else None
    length = row.get("response_length")
    return Entry(offset=offset, prompt=row["input"], uid=str(row.get("uid") if kind == "rollout" else row["input"]),
                 sample_index=int(row.get("sample_index") or 0) if kind == "rollout" else 0,
                 score=_num(row.get("score")),
                 components=tuple((str(k), _num(v)) for k, v in (comps or {}).items()) if isinstance(comps, dict)
                 else (),
                 error=bool(errors) or bool(row.get("error")), advantage=_num(row.get("advantage")),
                 length=int(length) if isinstance(length, (int, float)) and not isinstance(length, bool) else None,
                 truncated=row.get("truncated") if isinstance(row.get("truncated"), bool) else None,
                 tokens=bool(row.get("_tokens")))


def build_index(run_dir: str, kind: str, step: int) -> StepIndex:
    """Stream one dump into its index (the rows' texts are dropped as they are read)."""
    offsets, rows = [], []
    for offset, row in ingest.iter_sample_lines(run_dir, kind, step):
        offsets.append(offset)
        rows.append(_light(row))
    if kind == "rollout":
        rows = rollouts.normalize(rows, step)
    index = StepIndex(step=step, entries=[_entry(o, r, kind) for o, r in zip(offsets, rows, strict=True)])
    index.prompt_heads = {r["input"]: r["_head"] for r in rows}
    names: dict[str, None] = {}
    for i, e in enumerate(index.entries):
        index.by_prompt.setdefault(e.prompt, []).append(i)
        index.by_uid.setdefault(e.uid, []).append(i)
        names.update(dict.fromkeys(n for n, _ in e.components))
    index.components = list(names)
    return index


def step_index(run_dir: str, kind: str, step: int) -> StepIndex:
    """The cached index of one dump (rebuilt when the file's size or time changes)."""
    path = ingest.sample_file(run_dir, kind, step)
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        return StepIndex(step=step, entries=[])
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    index = build_index(run_dir, kind, step)
    with _lock:
        _cache[key] = index
        while len(_cache) > INDEX_CACHE:
            _cache.popitem(last=False)
    return index


def steps(run_dir: str, kind: str) -> list[int]:
    return ingest.sample_steps(run_dir, kind) if run_dir else []


# -- rows as the pages show them ---------------------------------------------------------------

def load(run_dir: str, kind: str, step: int, entry: Entry) -> dict[str, Any]:
    """One sample with its texts, read from its line (the index's numbers win over the raw row's)."""
    raw = ingest.read_sample_at(run_dir, kind, step, entry.offset) or {}
    errors = raw.get("errors") if isinstance(raw.get("errors"), dict) else {}
    return {
        "step": step, "offset": entry.offset, "prompt_key": entry.prompt, "uid": entry.uid,
        "sample_index": entry.sample_index, "input": raw.get("input", ""), "output": raw.get("output", ""),
        "gts": raw.get("gts"), "score": entry.score, "advantage": entry.advantage, "length": entry.length,
        "truncated": entry.truncated, "has_tokens": entry.tokens, "data_source": raw.get("data_source"),
        "components": [{"name": n, "value": v, "error": errors.get(n)} for n, v in entry.components],
        "error": raw.get("error") or "; ".join(f"{k}: {v}" for k, v in errors.items()),
        "reference": raw.get("reference"), "reference_score": _num(raw.get("reference_score")),
        "win": _num(raw.get("win")),
        # what each component's reward code printed for this sample (the rollout store's "reward_logs")
        "reward_logs": {str(k): str(v) for k, v in (raw.get("reward_logs") or {}).items() if v}
        if isinstance(raw.get("reward_logs"), dict) else {},
    }


@dataclass(frozen=True)
class Filters:
    component: str = ""
    min_score: float | None = None
    max_score: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    truncated: bool = False
    errors: bool = False
    prompt: str = ""  # the prompt contains this (case-insensitive; its first PROMPT_HEAD characters)

    @property
    def active(self) -> bool:
        return self != Filters()


def _score_for(entry: Entry, component: str) -> float | None:
    if not component:
        return entry.score
    return dict(entry.components).get(component)


def matches(entry: Entry, f: Filters, heads: dict[str, str] | None = None) -> bool:
    """Whether a sample passes the filters (a score filter skips samples without that score)."""
    if f.prompt and f.prompt.lower() not in (heads or {}).get(entry.prompt, "").lower():
        return False
    if f.component and f.component not in dict(entry.components):
        return False
    score = _score_for(entry, f.component)
    if (f.min_score is not None or f.max_score is not None) and score is None:
        return False
    if f.min_score is not None and score < f.min_score:  # type: ignore[operator]
        return False
    if f.max_score is not None and score > f.max_score:  # type: ignore[operator]
        return False
    if (f.min_length is not None or f.max_length is not None) and entry.length is None:
        return False
    if f.min_length is not None and entry.length < f.min_length:  # type: ignore[operator]
        return False
    if f.max_length is not None and entry.length > f.max_length:  # type: ignore[operator]
        return False
    if f.truncated and not entry.truncated:
        return False
    return not (f.errors and not entry.error)


def step_page(run_dir: str, kind: str, step: int, f: Filters, page: int) -> dict[str, Any]:
    """The samples of one step that pass the filters, PER_PAGE at a time (only those lines are read)."""
    index = step_index(run_dir, kind, step)
    hits = [e for e in index.entries if matches(e, f, index.prompt_heads)]
    start = (max(1, page) - 1) * PER_PAGE
    rows = [load(run_dir, kind, step, e) for e in hits[start:start + PER_PAGE]]
    return {"rows": rows, "total": len(index.entries), "matched": len(hits), "first_index": start,
            "last_index": start + len(rows),
            "has_prev": page > 1, "has_next": start + PER_PAGE < len(hits), "components": index.components,
            "prompts": len(index.by_prompt), "tokens_logged": any(e.tokens for e in index.entries)}


def prompt_columns(run_dir: str, kind: str, key: str, start: int = 0) -> dict[str, Any]:
    """A prompt's samples across steps: one column per step that has it, from the `start`-th logged step,
    at most MAX_COLUMNS columns and SCAN_BUDGET step files read; `next_start` continues."""
    all_steps = steps(run_dir, kind)
    start = min(max(0, start), len(all_steps))
    columns, scanned, i, prompt = [], 0, start, None
    while i < len(all_steps) and len(columns) < MAX_COLUMNS and scanned < SCAN_BUDGET:
        step = all_steps[i]
        index = step_index(run_dir, kind, step)
        scanned, i = scanned + 1, i + 1
        found = sorted((index.entries[j] for j in index.by_prompt.get(key, [])), key=lambda e: e.sample_index)
        if not found:
            continue
        shown = [load(run_dir, kind, step, e) for e in found[:SAMPLES_PER_COLUMN]]
        prompt = prompt if prompt is not None else shown[0]["input"]
        scores = [e.score for e in found if e.score is not None]
        columns.append({"step": step, "samples": shown, "n": len(found), "more": len(found) - len(shown),
                        "uid": found[0].uid, "mean": sum(scores) / len(scores) if scores else None,
                        "tie": is_tie([e.score for e in found])})
    return {"columns": columns, "prompt": prompt, "start": start, "next_start": i if i < len(all_steps) else None,
            "scanned": scanned, "steps_total": len(all_steps), "first_step": all_steps[start] if all_steps[start:]
            else None}


def is_tie(scores: list[float | None]) -> bool:
    """A group of two or more samples whose scores are all equal (zero advantage: no gradient)."""
    vals = [s for s in scores if s is not None]
    return len(vals) > 1 and len(vals) == len(scores) and max(vals) - min(vals) <= TIE_EPS


def group(run_dir: str, kind: str, step: int, uid: str) -> dict[str, Any] | None:
    """The n samples of one prompt at one step, with rewards and advantages; None when there is no such group."""
    index = step_index(run_dir, kind, step)
    found = sorted((index.entries[j] for j in index.by_uid.get(uid, [])), key=lambda e: e.sample_index)
    if not found:
        return None
    rows = [load(run_dir, kind, step, e) for e in found]
    scores = [e.score for e in found]
    return {"step": step, "uid": uid, "rows": rows, "n": len(rows), "tie": is_tie(scores),
            "tie_score": scores[0] if is_tie(scores) else None, "prompt": rows[0]["input"],
            "prompt_key": found[0].prompt, "components": index.components}


def sample_at(run_dir: str, kind: str, step: int, key: str, sample_index: int = 0) -> dict[str, Any] | None:
    """The prompt's sample number `sample_index` at `step` (its first when there are fewer)."""
    index = step_index(run_dir, kind, step)
    found = sorted((index.entries[j] for j in index.by_prompt.get(key, [])), key=lambda e: e.sample_index)
    if not found:
        return None
    chosen = next((e for e in found if e.sample_index == sample_index), found[0])
    return load(run_dir, kind, step, chosen)


def entry_at(run_dir: str, kind: str, step: int, offset: int) -> dict[str, Any] | None:
    """The sample whose line starts at `offset` (as the index knows it), with its tokens when logged."""
    index = step_index(run_dir, kind, step)
    entry = next((e for e in index.entries if e.offset == offset), None)
    if entry is None:
        return None
    row = load(run_dir, kind, step, entry)
    raw = ingest.read_sample_at(run_dir, kind, step, offset) or {}
    for key in (*rollouts.TOKEN_KEYS, "token_advantage"):
        row[key] = raw.get(key)
    group_adv = [abs(index.entries[i].advantage) for i in index.by_uid.get(entry.uid, [])
                 if index.entries[i].advantage is not None]
    row["group_max_advantage"] = max(group_adv, default=None)
    return row
