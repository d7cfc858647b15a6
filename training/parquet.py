"""Pinned data rows -> VERL's RL parquet schema.

VERL's `RLHFDataset` (verl/utils/dataset/rl_dataset.py) loads the file with
`datasets.load_dataset("parquet")` and every reward manager reads these columns:

    data_source   str                        selects the scorer, names the val metrics
    prompt        [{"role", "content"}]      the chat that the rollout engine templates
    ability       str
    reward_model  {"style": "rule", "ground_truth": str}
    extra_info    {"split", "index", ...}    handed to compute_score as `extra_info`

Used by the VERL backend and by the web app's "export VERL parquet"; no Django here.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from training import rundir

DEFAULT_DATA_SOURCE = "default"
DEFAULT_ABILITY = "general"
COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
# extra_info keys this module owns; user keys with the same name are overwritten.
RESERVED_EXTRA = ("split", "index", "reference", "prompt_messages")


class DataFormatError(ValueError):
    """A data row that cannot become a VERL record; the message names the row."""


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file of objects, naming the line of the first malformed one."""
    try:
        return rundir.read_jsonl(path, strict=True)
    except rundir.RunDirError as exc:
        raise DataFormatError(str(exc)) from None


def normalize_prompt(prompt: Any, where: str = "row") -> list[dict[str, str]]:
    """Return the prompt as a chat list; a plain string becomes one user turn."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise DataFormatError(f"{where}: prompt is empty")
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt:
        chat = []
        for i, msg in enumerate(prompt):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) \
                    or not isinstance(msg.get("content"), str):
                raise DataFormatError(f"{where}: prompt[{i}] must be an object with string 'role' and 'content'")
            chat.append({"role": msg["role"], "content": msg["content"]})
        return chat
    raise DataFormatError(f"{where}: prompt must be a non-empty string or a list of {{role, content}} messages")


def response_text(value: Any) -> str | None:
    """Return a response as text: a string as is, a chat list as its last assistant turn."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        turns = [m for m in value if isinstance(m, dict) and isinstance(m.get("content"), str)]
        assistant = [m for m in turns if m.get("role") == "assistant"]
        if assistant or turns:
            return (assistant or turns)[-1]["content"]
    return json.dumps(value, ensure_ascii=False)


def _ground_truth(value: Any) -> str:
    # VERL passes ground_truth through untouched; a string keeps the parquet column one type.
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False)


def to_verl_record(
    row: dict[str, Any], split: str, index: int, *, include_prompt_messages: bool = False,
) -> dict[str, Any]:
    """Convert one pinned row (GRPO prompt or preference pair) into a VERL record.

    Preference pairs have no ground truth: their `chosen` response becomes the ground truth and
    the reference, so a reward function can still compare against it.
    `include_prompt_messages` stores the chat as JSON in extra_info, for reward models, which
    need the prompt but only receive `solution_str` and `extra_info`.
    """
    where = f"{split} row {index}"
    if not isinstance(row, dict):
        raise DataFormatError(f"{where}: expected an object")
    prompt = normalize_prompt(row.get("prompt"), where)
    chosen = response_text(row.get("chosen"))
    gt = row.get("ground_truth")
    if gt is None and chosen is not None:
        gt = chosen
    reference = row.get("reference")
    reference = response_text(reference) if reference is not None else chosen

    user_extra = row.get("extra_info") or {}
    if not isinstance(user_extra, dict):
        raise DataFormatError(f"{where}: extra_info must be an object")
    extra: dict[str, Any] = {k: v for k, v in user_extra.items() if k not in RESERVED_EXTRA}
    extra.update({"split": split, "index": int(index)})
    if reference is not None:
        extra["reference"] = reference
    if include_prompt_messages:
        extra["prompt_messages"] = json.dumps(prompt, ensure_ascii=False)

    data_source = row.get("data_source") or DEFAULT_DATA_SOURCE
    if not isinstance(data_source, str):
        raise DataFormatError(f"{where}: data_source must be a string")
    ability = row.get("ability") or DEFAULT_ABILITY
    return {
        "data_source": data_source,
        "prompt": prompt,
        "ability": str(ability),
        "reward_model": {"style": "rule", "ground_truth": _ground_truth(gt)},
        "extra_info": extra,
    }


def rows_to_records(
    rows: Iterable[dict[str, Any]], split: str, *, include_prompt_messages: bool = False,
) -> list[dict[str, Any]]:
    """Convert rows in order; `extra_info.index` is the row's position in its split."""
    return [to_verl_record(r, split, i, include_prompt_messages=include_prompt_messages)
            for i, r in enumerate(rows)]


def _extra_as_strings(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON-encode user extra_info values so that rows with clashing types share one column type."""
    out = []
    for rec in records:
        extra = {k: (v if k in RESERVED_EXTRA or isinstance(v, str) or v is None
                     else json.dumps(v, ensure_ascii=False))
                 for k, v in rec["extra_info"].items()}
        out.append({**rec, "extra_info": extra})
    return out


def records_to_table(records: Sequence[dict[str, Any]]):
    """Build the Arrow table; extra_info values of clashing types fall back to JSON strings."""
    import pyarrow as pa

    if not records:
        raise DataFormatError("no rows to write: a VERL split needs at least one prompt")
    try:
        return pa.Table.from_pylist(list(records))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.Table.from_pylist(_extra_as_strings(records))


def write_verl_parquet(
    rows: Iterable[dict[str, Any]], path: str | Path, split: str, *, include_prompt_messages: bool = False,
) -> Path:
    """Write `rows` as a VERL RL parquet file at `path` and return the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = rows_to_records(rows, split, include_prompt_messages=include_prompt_messages)
    sink = pa.BufferOutputStream()
    pq.write_table(records_to_table(records), sink)
    # atomic: a half-written parquet would fail the whole run at load time
    return rundir.write_atomic(path, sink.getvalue().to_pybytes())


def check_verl_schema(path: str | Path) -> int:
    """Load `path` the way VERL does and check its columns; return the row count."""
    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(path))["train"]
    missing = [c for c in COLUMNS if c not in ds.column_names]
    if missing:
        raise DataFormatError(f"{path}: missing VERL columns {missing}")
    for i, row in enumerate(ds):
        if "ground_truth" not in (row["reward_model"] or {}):
            raise DataFormatError(f"{path}: row {i} has no reward_model.ground_truth")
        normalize_prompt(row["prompt"], f"{path} row {i}")
    return len(ds)
