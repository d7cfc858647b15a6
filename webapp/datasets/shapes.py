"""Dataset shapes: detect which one a file holds, map its columns, validate and normalise each row.

Preference pairs: TRL standard (prompt/chosen/rejected text), TRL conversational (message lists; a
missing prompt is the shared prefix of the two conversations) and HH-RLHF transcripts (text with
"\\n\\nHuman:"/"\\n\\nAssistant:" turns; the prompt is everything up to the last Assistant turn).
Verifiable prompts: prompt + ground_truth (+ data_source, ability, extra_info), including VERL's own
rows (prompt as a chat list, reward_model.ground_truth). No ORM here.
"""
from __future__ import annotations

import contextlib
import difflib
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from webapp.datasets.parsing import FileError

FIELDS = ("prompt", "chosen", "rejected", "ground_truth", "data_source", "ability", "extra_info", "split")
SHAPE_LABELS = {
    "trl_standard": "TRL standard preference pairs (prompt / chosen / rejected text)",
    "trl_conversational": "TRL conversational preference pairs (message lists)",
    "hh_rlhf": "HH-RLHF transcripts (Human / Assistant turns)",
    "prompts": "Verifiable prompts (prompt + ground_truth)",
    "verl": "VERL parquet rows (chat prompt + reward_model.ground_truth)",
}
KIND_OF_SHAPE = {"trl_standard": "preference", "trl_conversational": "preference", "hh_rlhf": "preference",
                 "prompts": "prompts", "verl": "prompts"}
EXPECTED = {"preference": "prompt, chosen, rejected (or chosen/rejected conversations, or HH-RLHF transcripts)",
            "prompts": "prompt and ground_truth (optional: data_source, ability, extra_info)"}
# Names other tools use for our fields: offered as a suggested mapping, never applied silently.
ALIASES = {
    "prompt": ["question", "query", "instruction", "input", "problem", "context", "messages", "conversation"],
    "chosen": ["response_chosen", "chosen_response", "preferred", "better", "good", "winner", "accepted"],
    "rejected": ["response_rejected", "rejected_response", "dispreferred", "worse", "bad", "loser"],
    "ground_truth": ["answer", "solution", "target", "label", "reference", "expected", "final_answer", "gt",
                     "output", "reward_model.ground_truth"],
    "data_source": ["source", "dataset", "origin", "task"],
    "ability": ["category", "domain", "skill"],
    "extra_info": ["metadata", "meta", "info"],
}
HUMAN, ASSISTANT = "\n\nHuman:", "\n\nAssistant:"
VERL_GT = "reward_model.ground_truth"
SPLIT_VALUES = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
                "dev": "val", "eval": "val", "test": "val"}
_DUMP = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


TEXT_STORED_FIELDS = ("prompt", "chosen", "rejected")


def stored_value(stored, text: str):
    """A row's prompt, chosen or rejected from its JSON column and its text column (see `models.DatasetRow.prompt`)."""
    return stored if stored is not None else (text or None)


def restore_stored(record: dict[str, Any]) -> dict[str, Any]:
    """Fill in a `values()` record's prompt, chosen and rejected where it also holds their text columns."""
    for name in TEXT_STORED_FIELDS:
        if name in record and f"{name}_text" in record:
            record[name] = stored_value(record[name], record[f"{name}_text"])
    return record


def stored_json(value, text: str):
    """What a row's JSON column holds for `value`: NULL when the text column already holds it."""
    return None if type(value) is str and value and value == text else value


class RowError(ValueError):
    """One row cannot be imported; the message is the reason shown in the report."""

    def __init__(self, reason: str, field_name: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.field = field_name


@dataclass
class Shape:
    name: str
    kind: str
    field_map: dict[str, str]  # our field -> source column (a dotted path reaches into an object)
    has_ground_truth: bool = False
    used_columns: set[str] = field(default_factory=set)  # columns that feed a field; the rest go to extra_info

    @property
    def label(self) -> str:
        return SHAPE_LABELS[self.name]


@dataclass
class Row:
    prompt: Any
    chosen: Any
    rejected: Any
    ground_truth: str
    data_source: str
    ability: str
    extra_info: dict[str, Any]
    split: str | None
    prompt_text: str
    chosen_text: str
    rejected_text: str
    row_hash: str
    # Serialised once: stored as-is by the PostgreSQL COPY path, and hashed into the version's content hash.
    # None when the fast path made the row: `json_texts()` decodes `raw` if a writer needs it.
    json: dict[str, str] | None
    canonical: bytes
    # The same JSON as bytes, when the fast path made it (`fastrows`): COPY lines are built from these.
    raw: dict[str, bytes] | None = field(default=None, compare=False, repr=False)

    def json_texts(self) -> dict[str, str]:
        if self.json is None:
            self.json = {k: v.decode() for k, v in self.raw.items()}
        return self.json

    def column_json(self, name: str) -> str | None:
        """The JSON text the row's `name` column (prompt, chosen or rejected) holds; None (NULL) when its text
        column holds the value (`stored_json`)."""
        if stored_json(getattr(self, name), getattr(self, f"{name}_text")) is None:
            return None
        return self.json_texts()[name]


def parse_column_map(text: str) -> dict[str, str]:
    """Parse 'prompt=question,ground_truth=answer' into a mapping; raise ValueError with a clear message."""
    mapping: dict[str, str] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        ours, sep, theirs = part.partition("=")
        if not sep or not ours.strip() or not theirs.strip():
            raise ValueError(f"'{part}' is not FIELD=COLUMN (for example prompt=question).")
        mapping[ours.strip()] = theirs.strip()
    check_column_map(mapping)
    return mapping


def check_column_map(mapping: dict[str, str] | None) -> dict[str, str]:
    mapping = {k: v for k, v in (mapping or {}).items() if v}
    unknown = [k for k in mapping if k not in FIELDS]
    if unknown:
        raise ValueError(f"Unknown field {unknown[0]!r} in the column mapping; the fields are: {', '.join(FIELDS)}.")
    bad = [k for k, v in mapping.items() if not isinstance(v, str)]
    if bad:
        raise ValueError(f"The column mapped to {bad[0]!r} must be a column name.")
    return mapping


def suggest_mapping(columns: Iterable[str], kind: str | None = None) -> dict[str, str]:
    """Guess our field for each column by exact name, known alias, then close spelling."""
    columns = list(columns)
    lowered = {c.lower(): c for c in columns}
    wanted = [f for f in FIELDS if f != "split"]
    if kind == "prompts":
        wanted = [f for f in wanted if f not in ("chosen", "rejected")]
    elif kind == "preference":
        wanted = [f for f in wanted if f != "ground_truth"]
    suggestion: dict[str, str] = {}
    taken: set[str] = set()
    for ours in wanted:
        for candidate in [ours, *ALIASES.get(ours, [])]:
            col = lowered.get(candidate)
            if col is None and candidate == VERL_GT and "reward_model" in columns:
                col = VERL_GT
            if col and col not in taken:
                suggestion[ours], _ = col, taken.add(col)
                break
        else:
            close = difflib.get_close_matches(ours, [c for c in columns if c not in taken], n=1, cutoff=0.8)
            if close:
                suggestion[ours], _ = close[0], taken.add(close[0])
    return suggestion


def lookup(data: dict[str, Any], source: str) -> Any:
    """Read a column, or a dotted path into nested objects (reward_model.ground_truth)."""
    if source in data:
        return data[source]
    value: Any = data
    for part in source.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def detect_shape(columns: list[str], sample: list[dict[str, Any]], column_map: dict[str, str] | None = None,
                 kind: str | None = None) -> Shape:
    """Decide the shape from the columns and the first rows, or raise FileError('needs_mapping')."""
    try:
        column_map = check_column_map(column_map)
    except ValueError as exc:
        raise _needs_mapping(str(exc), columns, sample, kind) from None
    missing = [v for v in column_map.values() if v not in columns and v.split(".")[0] not in columns]
    if missing:
        raise _needs_mapping(f"The column {missing[0]!r} is not in the file. Its columns are: {', '.join(columns)}.",
                             columns, sample, kind)
    mapped_sources = set(column_map.values())
    field_map = {f: f for f in FIELDS if f in columns and f not in column_map and f not in mapped_sources}
    field_map.update(column_map)
    if "ground_truth" not in field_map and "reward_model" in columns and kind != "preference":
        field_map["ground_truth"] = VERL_GT

    def present(name: str) -> bool:
        return name in field_map and any(lookup(r, field_map[name]) not in (None, "") for r in sample)

    is_pref = present("chosen") and present("rejected")
    if kind == "preference" or (kind is None and is_pref):
        if not is_pref:
            raise _needs_mapping("Preference pairs need a chosen and a rejected column.", columns, sample, kind)
        field_map.pop("ground_truth", None)
        chosen = next(lookup(r, field_map["chosen"]) for r in sample if lookup(r, field_map["chosen"]))
        if isinstance(_maybe_messages(chosen), list):
            name = "trl_conversational"
        elif present("prompt"):
            name = "trl_standard"
        elif isinstance(chosen, str) and HUMAN in chosen and ASSISTANT in chosen:
            name = "hh_rlhf"
        else:
            raise _needs_mapping("chosen and rejected are plain text but there is no prompt column: map one "
                                 "(or upload HH-RLHF transcripts with Human/Assistant turns).", columns, sample,
                                 "preference")
        return _shape(name, field_map)
    if kind == "prompts" or (kind is None and present("prompt")):
        if not present("prompt"):
            raise _needs_mapping("Verifiable prompts need a prompt column.", columns, sample, "prompts")
        field_map.pop("chosen", None)
        field_map.pop("rejected", None)
        name = "verl" if field_map.get("ground_truth") == VERL_GT else "prompts"
        return _shape(name, field_map, has_ground_truth="ground_truth" in field_map)
    raise _needs_mapping("Could not tell which columns hold the data.", columns, sample, kind)


def _shape(name: str, field_map: dict[str, str], has_ground_truth: bool = False) -> Shape:
    used = {src.split(".")[0] for src in field_map.values()} | set(field_map.values())
    return Shape(name=name, kind=KIND_OF_SHAPE[name], field_map=field_map, has_ground_truth=has_ground_truth,
                 used_columns=used)


def _needs_mapping(reason: str, columns: list[str], sample: list[dict[str, Any]], kind: str | None) -> FileError:
    expected = EXPECTED.get(kind or "", f"{EXPECTED['preference']}; or {EXPECTED['prompts']}")
    suggestion = suggest_mapping(columns, kind)
    hint = ""
    if suggestion:
        hint = " Suggested mapping: " + ",".join(f"{k}={v}" for k, v in suggestion.items()) + "."
    message = f"{reason} The file has the columns: {', '.join(columns) or '(none)'}. Expected: {expected}.{hint}"
    return FileError("needs_mapping", message, columns=columns, expected=expected, suggested_map=suggestion,
                     preview=[_preview_row(r) for r in sample[:5]])


def _preview_row(row: dict[str, Any], limit: int = 200) -> dict[str, str]:
    out = {}
    for k, v in row.items():
        text = v if isinstance(v, str) else orjson.dumps(v, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        out[str(k)] = text if len(text) <= limit else text[: limit - 1] + "…"
    return out


# ---- per-row normalisation ------------------------------------------------------------------------------

def _maybe_messages(value: Any) -> Any:
    """CSV cells hold message lists as JSON text: decode those, leave everything else alone."""
    if isinstance(value, str) and value.lstrip().startswith("[{"):
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        if isinstance(decoded, list) and all(isinstance(m, dict) and "role" in m for m in decoded):
            return decoded
    return value


def _kind_of(value: Any) -> str:
    return {str: "text", bool: "true/false", int: "a number", float: "a number", dict: "an object",
            list: "a list", type(None): "null"}.get(type(value), type(value).__name__)


def _messages(value: list, name: str) -> list:
    if not value:
        raise RowError(f"{name} is an empty message list", name)
    for i, msg in enumerate(value):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) \
                or not isinstance(msg.get("content"), str):
            raise RowError(f"{name}[{i}] must be an object with text 'role' and 'content'", name)
    if not any(m["content"].strip() for m in value):
        raise RowError(f"{name} is empty (every message has empty content)", name)
    return value


def text_of(value: Any) -> str:
    """Flatten a prompt or response for search, display and lengths."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if len(value) == 1:
        return value[0]["content"]
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in value)


def _content(value: Any, name: str, required: bool = True) -> Any:
    value = _maybe_messages(value)
    if value is None or (isinstance(value, str) and value == ""):
        if required:
            raise RowError(f"missing {name}", name)
        return None
    if isinstance(value, str):
        if not value.strip():
            raise RowError(f"{name} is empty (only whitespace)", name)
        return value
    if isinstance(value, list):
        return _messages(value, name)
    raise RowError(f"{name} must be text or a list of {{role, content}} messages, got {_kind_of(value)}", name)


def _split_hh(chosen: str, rejected: str) -> tuple[str, str, str]:
    i, j = chosen.rfind(ASSISTANT), rejected.rfind(ASSISTANT)
    if i < 0 or j < 0:
        raise RowError("no prompt column, and chosen/rejected are not HH-RLHF transcripts "
                       "(no '\\n\\nAssistant:' turn)", "prompt")
    cut_c, cut_r = i + len(ASSISTANT), j + len(ASSISTANT)
    if chosen[:cut_c] != rejected[:cut_r]:
        raise RowError("chosen and rejected differ before the last Assistant turn: an HH-RLHF pair must share "
                       "the conversation and differ only in the final response", "rejected")
    return chosen[:cut_c], chosen[cut_c:], rejected[cut_r:]


def _split_shared_prefix(chosen: list, rejected: list) -> tuple[list, list, list]:
    k = 0
    while k < min(len(chosen), len(rejected)) and chosen[k] == rejected[k]:
        k += 1
    if k == 0:
        raise RowError("no prompt column, and chosen/rejected share no opening messages to use as the prompt",
                       "prompt")
    return chosen[:k], chosen[k:], rejected[k:]


def _meta_text(value: Any, name: str, max_len: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RowError(f"{name} must be text, got {_kind_of(value)}", name)
    if len(value) > max_len:
        raise RowError(f"{name} is {len(value):,} characters; at most {max_len} fit", name)
    return value


def _ground_truth(value: Any) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    return orjson.dumps(value, option=_DUMP).decode()


def _extra(data: dict[str, Any], shape: Shape) -> dict[str, Any]:
    source = shape.field_map.get("extra_info")
    extra = lookup(data, source) if source else None
    if isinstance(extra, str) and extra.strip().startswith("{"):
        with contextlib.suppress(orjson.JSONDecodeError):
            extra = orjson.loads(extra)
    if extra is None or extra == "":
        extra = {}
    if not isinstance(extra, dict):
        raise RowError(f"extra_info must be an object, got {_kind_of(extra)}", "extra_info")
    extra = dict(extra)
    if shape.name == "verl":
        # VERL writes these per split on export; parquet also turns absent struct keys into nulls.
        extra = {k: v for k, v in extra.items() if k not in ("split", "index") and v is not None}
    for key, value in data.items():  # columns that feed no field are kept, not dropped
        if key not in shape.used_columns and key not in extra:
            extra[key] = value
    return extra


def _preference_sides(data: dict[str, Any], shape: Shape, prompt: Any) -> tuple[Any, Any, Any]:
    """(prompt, chosen, rejected) of a preference record; a missing prompt is split off the responses."""
    fm = shape.field_map
    chosen = _content(lookup(data, fm["chosen"]), "chosen")
    rejected = _content(lookup(data, fm["rejected"]), "rejected")
    if isinstance(chosen, str) != isinstance(rejected, str):
        raise RowError("chosen and rejected must both be text or both be message lists", "rejected")
    if prompt is None:
        if isinstance(chosen, str):
            prompt, chosen, rejected = _split_hh(chosen, rejected)
        else:
            prompt, chosen, rejected = _split_shared_prefix(chosen, rejected)
    if not chosen or (isinstance(chosen, str) and not chosen.strip()):
        raise RowError("the chosen response is empty", "chosen")
    if not rejected or (isinstance(rejected, str) and not rejected.strip()):
        raise RowError("the rejected response is empty", "rejected")
    return prompt, chosen, rejected


def _prompt_and_ground_truth(data: dict[str, Any], shape: Shape, prompt: Any) -> tuple[Any, str]:
    """(prompt, ground truth) of a prompt record."""
    if shape.name == "verl" and isinstance(prompt, list) and len(prompt) == 1 and prompt[0]["role"] == "user" \
            and set(prompt[0]) == {"role", "content"}:
        prompt = prompt[0]["content"]  # VERL wraps every prompt in a chat list; one user turn is plain text
    if not shape.has_ground_truth:
        return prompt, ""
    raw = lookup(data, shape.field_map["ground_truth"])
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise RowError("missing ground_truth" if raw is None else "ground_truth is empty", "ground_truth")
    return prompt, _ground_truth(raw)


def _split(raw_split: Any) -> str:
    split = SPLIT_VALUES.get(str(raw_split).strip().lower()) if raw_split not in (None, "") else None
    if split is None:
        raise RowError(f"split must be train or val (also accepted: validation, test, dev), got {raw_split!r}",
                       "split")
    return split


def normalize(data: dict[str, Any], shape: Shape, max_chars: int) -> Row:
    """Validate one record and return the row to store, or raise RowError with the reason."""
    fm = shape.field_map
    prompt = _content(lookup(data, fm["prompt"]) if "prompt" in fm else None, "prompt",
                      required=shape.kind == "prompts")
    chosen = rejected = None
    ground_truth = ""
    if shape.kind == "preference":
        prompt, chosen, rejected = _preference_sides(data, shape, prompt)
    else:
        prompt, ground_truth = _prompt_and_ground_truth(data, shape, prompt)
    data_source = _meta_text(lookup(data, fm["data_source"]) if "data_source" in fm else None, "data_source", 200)
    ability = _meta_text(lookup(data, fm["ability"]) if "ability" in fm else None, "ability", 100)
    split = _split(lookup(data, fm["split"])) if "split" in fm else None
    extra = _extra(data, shape)
    texts = {"prompt": text_of(prompt), "chosen": text_of(chosen), "rejected": text_of(rejected),
             "ground_truth": ground_truth}
    for name, text in texts.items():
        if len(text) > max_chars:
            raise RowError(f"{name} is {len(text):,} characters long; the limit is {max_chars:,} "
                           "(DATASET_MAX_TEXT_CHARS)", name)
    try:
        j = {"prompt": orjson.dumps(prompt, option=_DUMP), "chosen": orjson.dumps(chosen, option=_DUMP),
             "rejected": orjson.dumps(rejected, option=_DUMP),
             "extra_info": orjson.dumps(extra, option=_DUMP, default=str)}
    except TypeError as exc:
        raise RowError(f"a value cannot be stored as JSON ({exc})") from None
    pair = b"\x1f".join((j["prompt"], j["chosen"], j["rejected"], ground_truth.encode()))
    canonical = b"\x1f".join((pair, data_source.encode(), ability.encode(), j["extra_info"]))
    if b"\\u0000" in canonical or "\x00" in data_source or "\x00" in ability or "\x00" in ground_truth:
        raise RowError("contains a NUL character (\\u0000), which the database cannot store")
    if chosen is not None and j["chosen"] == j["rejected"]:
        raise RowError("chosen is identical to rejected", "rejected")
    if j["extra_info"] != b"{}":
        extra = orjson.loads(j["extra_info"])  # plain JSON types only (Parquet may hold dates, bytes…)
    return Row(prompt=prompt, chosen=chosen, rejected=rejected, ground_truth=ground_truth, data_source=data_source,
               ability=ability, extra_info=extra, split=split, prompt_text=texts["prompt"],
               chosen_text=texts["chosen"], rejected_text=texts["rejected"],
               row_hash=hashlib.sha256(pair).hexdigest(),
               json={k: v.decode() for k, v in j.items()}, canonical=canonical)
