"""Exports: VERL parquet, TRL preference JSONL and plain JSONL, streamed row by row.

Rows are the run-directory row dicts (see selectors.row_dict and docs/run-directory.md), so the same
writers serve a whole version and the review app's approved rows (webapp/review/exports.py). The VERL
record of each row comes from training.parquet.to_verl_record, which the VERL backend also uses.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets import selectors
from webapp.datasets.models import DatasetVersion

FORMATS = {"verl": "VERL parquet", "trl": "TRL JSONL", "jsonl": "Plain JSONL"}
TRL_STYLES = ("auto", "standard", "conversational")
_PARQUET_BATCH = 2000


@dataclass
class ExportResult:
    path: Path
    rows: int
    format: str


def export_filename(version: DatasetVersion, fmt: str, suffix: str = "") -> str:
    stem = f"{version.dataset.name}-v{version.number}" + (f"-{suffix}" if suffix else "")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)
    return f"{safe}.parquet" if fmt == "verl" else f"{safe}.{fmt}.jsonl"


def export_rows(version: DatasetVersion) -> Iterable[dict[str, Any]]:
    """Every row of the version, in order (the review app exports the approved ones: review/exports.py)."""
    return selectors.iter_row_dicts(version)


def _messages(text: Any, role: str) -> Any:
    return [{"role": role, "content": text}] if isinstance(text, str) else text


def _last_content(value: Any) -> Any:
    if isinstance(value, list) and value:
        return value[-1].get("content", "")
    return value


def _flat(value: Any) -> Any:
    if isinstance(value, list):
        from webapp.datasets.shapes import text_of

        return text_of(value)
    return value


def trl_record(row: dict[str, Any], kind: str, style: str = "auto") -> dict[str, Any]:
    """TRL's columns first (standard: text; conversational: message lists), metadata only when set."""
    prompt = row.get("prompt")
    if kind == "preference":
        chosen, rejected = row.get("chosen"), row.get("rejected")
        if style == "conversational":
            prompt, chosen, rejected = (_messages(prompt, "user"), _messages(chosen, "assistant"),
                                        _messages(rejected, "assistant"))
        elif style == "standard":
            prompt, chosen, rejected = _flat(prompt), _last_content(chosen), _last_content(rejected)
        out = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
    else:
        if style == "conversational":
            prompt = _messages(prompt, "user")
        elif style == "standard":
            prompt = _flat(prompt)
        out = {"prompt": prompt, "ground_truth": row.get("ground_truth", "")}
    for key in ("data_source", "ability", "extra_info"):
        if row.get(key):
            out[key] = row[key]
    return out


def plain_record(row: dict[str, Any], kind: str) -> dict[str, Any]:
    """Every stored field of a row, the same keys on every line (the split included)."""
    core = ({"prompt": row.get("prompt"), "chosen": row.get("chosen"), "rejected": row.get("rejected")}
            if kind == "preference" else {"prompt": row.get("prompt"), "ground_truth": row.get("ground_truth", "")})
    return {**core, "data_source": row.get("data_source") or "", "ability": row.get("ability") or "",
            "extra_info": row.get("extra_info") or {}, "split": row.get("split") or "train"}


def write_jsonl(rows: Iterable[dict[str, Any]], fh: IO[bytes], kind: str, fmt: str = "jsonl",
                style: str = "auto") -> int:
    n = 0
    for row in rows:
        record = trl_record(row, kind, style) if fmt == "trl" else plain_record(row, kind)
        fh.write(orjson.dumps(record) + b"\n")
        n += 1
    return n


def jsonl_chunks(rows: Iterable[dict[str, Any]], kind: str, fmt: str, style: str = "auto",
                 per_chunk: int = 500) -> Iterator[bytes]:
    """Bytes for a streaming HTTP response."""
    buf: list[bytes] = []
    for row in rows:
        record = trl_record(row, kind, style) if fmt == "trl" else plain_record(row, kind)
        buf.append(orjson.dumps(record) + b"\n")
        if len(buf) >= per_chunk:
            yield b"".join(buf)
            buf = []
    if buf:
        yield b"".join(buf)


def _extra_types(rows: Iterable[dict[str, Any]]) -> dict[str, str]:
    """One Arrow type per user extra_info key across all rows; clashing or nested values become JSON text."""
    from training.parquet import RESERVED_EXTRA

    seen: dict[str, set[str]] = {}
    for row in rows:
        for key, value in (row.get("extra_info") or {}).items():
            if key in RESERVED_EXTRA or value is None:
                continue
            kind = ("bool" if isinstance(value, bool) else "int" if isinstance(value, int)
                    else "float" if isinstance(value, float) else "str" if isinstance(value, str) else "json")
            seen.setdefault(key, set()).add(kind)
    types = {}
    for key, kinds in seen.items():
        if kinds <= {"int", "float"}:
            types[key] = "float" if "float" in kinds else "int"
        elif len(kinds) == 1 and kinds != {"json"}:
            types[key] = next(iter(kinds))
        else:
            types[key] = "json"
    return types


def _verl_schema(extra_types: dict[str, str], with_reference: bool):
    import pyarrow as pa

    arrow = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string(), "json": pa.string()}
    extra = [pa.field("split", pa.string()), pa.field("index", pa.int64())]
    if with_reference:
        extra.append(pa.field("reference", pa.string()))
    extra += [pa.field(k, arrow[t]) for k, t in sorted(extra_types.items())]
    message = pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())])
    return pa.schema([
        pa.field("data_source", pa.string()), pa.field("prompt", pa.list_(message)), pa.field("ability", pa.string()),
        pa.field("reward_model", pa.struct([pa.field("style", pa.string()), pa.field("ground_truth", pa.string())])),
        pa.field("extra_info", pa.struct(extra)),
    ])


def write_verl_parquet(rows_factory, path: str | Path, kind: str) -> int:
    """Write VERL's RL parquet schema; `rows_factory()` is called twice (a type pass, then the write)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from training.parquet import DataFormatError, to_verl_record

    extra_types = _extra_types(rows_factory())
    schema = _verl_schema(extra_types, with_reference=kind == "preference")
    json_keys = {k for k, t in extra_types.items() if t == "json"}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with pq.ParquetWriter(path, schema) as writer:
        batch: list[dict[str, Any]] = []
        for row in rows_factory():
            try:
                record = to_verl_record(row, row.get("split") or "train", int(row.get("index", n)))
            except DataFormatError as exc:
                raise ApplicationError(f"Row {row.get('index', n)} cannot be exported to VERL: {exc}") from None
            extra = record["extra_info"]
            for key in json_keys & extra.keys():
                if extra[key] is not None:
                    extra[key] = json.dumps(extra[key], ensure_ascii=False)
            batch.append(record)
            n += 1
            if len(batch) >= _PARQUET_BATCH:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    if n == 0:
        path.unlink(missing_ok=True)
        raise ApplicationError("There are no rows to export.")
    return n


def export_version(*, version: DatasetVersion, fmt: str, out_path: str | Path, rows: list[dict] | None = None,
                   label: str = "", trl_style: str = "auto", user=None) -> ExportResult:
    """Write one version (or the `rows` a caller chose from it, e.g. the approved ones) to `out_path`; audited."""
    if fmt not in FORMATS:
        raise ApplicationError(f"Unknown format '{fmt}': use {', '.join(FORMATS)}.", field="format")
    if trl_style not in TRL_STYLES:
        raise ApplicationError(f"Unknown TRL style '{trl_style}': use {', '.join(TRL_STYLES)}.", field="trl_style")
    kind = version.dataset.kind
    out_path = Path(out_path)
    if rows is not None:
        chosen = rows

        def factory():
            return iter(chosen)
    else:
        def factory():
            return selectors.iter_row_dicts(version)
    if fmt == "verl":
        n = write_verl_parquet(factory, out_path, kind)
    else:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with out_path.open("wb") as fh:
            n = write_jsonl(factory(), fh, kind, fmt, trl_style)
    audit(actor=user, action="dataset.export", project=version.project, obj=version,
          summary=f"Exported {count(n, 'row')} of {version} as {FORMATS[fmt]}" + (f" ({label})" if label else ""))
    return ExportResult(path=out_path, rows=n, format=fmt)
