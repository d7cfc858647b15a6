"""The plain-row fast path of an import, and the PostgreSQL COPY line of a row (no ORM here).

Most rows of most files are plain: text prompt, text responses or a text ground truth, short
metadata, no odd columns. `plain_normalizer(shape, max_chars)` returns a function that turns such a
record into exactly the `Row` that `shapes.normalize` returns, doing only the checks that can fail for
plain text. For anything else (message lists, blank or over-long values, numbers where text belongs,
identical responses, NUL characters...) it returns None and the caller runs `normalize`, which gives
the verdict and the exact reason. The fast path never rejects a row, so every error a user sees is
normalize's, and a row it accepts is one normalize accepts, byte for byte (tests compare the two).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import orjson

from webapp.datasets.shapes import _DUMP, SPLIT_VALUES, Row, RowError, Shape, _extra

PlainNormalizer = Callable[[dict[str, Any]], "Row | None"]
_sha256 = hashlib.sha256
_dumps = orjson.dumps


def _plain_within(value: Any, max_chars: int) -> bool:
    """Non-blank text of at most `max_chars` that is not a message list written as JSON text (those take the
    full path)."""
    if type(value) is not str or value == "" or len(value) > max_chars:
        return False
    first = value[0]
    if first == "[" or first.isspace():  # rare: only then look past the leading blanks (lstrip copies the text)
        return not value.isspace() and not value.lstrip().startswith("[{")
    return True


def plain_normalizer(shape: Shape, max_chars: int) -> PlainNormalizer | None:
    """The fast path for this shape, or None when the shape has no plain case (VERL, HH-RLHF, messages)."""
    if shape.name not in ("trl_standard", "prompts"):
        return None
    fm = shape.field_map
    if any("." in source for source in fm.values()):
        return None  # dotted paths into objects: the full lookup
    preference = shape.kind == "preference"
    p_key, c_key, r_key = fm.get("prompt"), fm.get("chosen"), fm.get("rejected")
    gt_key = fm.get("ground_truth") if shape.has_ground_truth and not preference else None
    ds_key, ab_key, split_key = fm.get("data_source"), fm.get("ability"), fm.get("split")
    used = shape.used_columns
    mapped_extra = "extra_info" in fm
    if p_key is None or (preference and (c_key is None or r_key is None)):
        return None

    def plain_row(data: dict[str, Any]) -> Row | None:
        get = data.get
        prompt = get(p_key)
        if not _plain_within(prompt, max_chars):
            return None
        if preference:
            chosen, rejected, ground_truth = get(c_key), get(r_key), ""
            if not (_plain_within(chosen, max_chars) and _plain_within(rejected, max_chars)):
                return None
        else:
            chosen = rejected = None
            ground_truth = _plain_ground_truth(get(gt_key) if gt_key is not None else "", gt_key is not None,
                                               max_chars)
        data_source = _short_text(get(ds_key) if ds_key is not None else None, 200)
        ability = _short_text(get(ab_key) if ab_key is not None else None, 100)
        split = _plain_split(get(split_key)) if split_key is not None else None
        if None in (ground_truth, data_source, ability) or (split_key is not None and split is None):
            return None
        extra = _plain_extra(data, shape, used, mapped_extra)
        if extra is None:
            return None
        return _row(prompt, chosen, rejected, ground_truth, data_source, ability, split, *extra)

    return plain_row


def _plain_ground_truth(value: Any, mapped: bool, max_chars: int) -> str | None:
    """The ground truth as normalize keeps it; None when it needs the full path (blank only when mapped)."""
    if type(value) is not str or len(value) > max_chars:
        return None
    if mapped and (value == "" or value.isspace()):
        return None
    return value


def _short_text(value: Any, limit: int) -> str | None:
    """An optional short text column: '' when absent, None when it needs the full path."""
    if value is None:
        return ""
    return value if type(value) is str and len(value) <= limit else None


def _plain_split(value: Any) -> str | None:
    return SPLIT_VALUES.get(value) if type(value) is str else None


def _plain_extra(data: dict[str, Any], shape: Shape, used: frozenset[str] | set[str],
                 mapped_extra: bool) -> tuple[dict[str, Any], bytes] | None:
    """(extra_info, its JSON) as normalize writes them; None when it needs the full path."""
    if not mapped_extra and used.issuperset(data):
        return {}, b"{}"
    try:
        extra = _extra(data, shape)
        extra_json = _dumps(extra, option=_DUMP, default=str)
    except (RowError, TypeError):
        return None
    if extra_json != b"{}":
        extra = orjson.loads(extra_json)
    return extra, extra_json


def _row(prompt: str, chosen: str | None, rejected: str | None, ground_truth: str, data_source: str, ability: str,
         split: str | None, extra: dict[str, Any], extra_json: bytes) -> Row | None:
    """The Row of checked plain values; None when a NUL or identical responses need normalize's verdict."""
    prompt_json = _dumps(prompt)
    chosen_json, rejected_json = _dumps(chosen), _dumps(rejected)
    pair = b"\x1f".join((prompt_json, chosen_json, rejected_json, ground_truth.encode()))
    canonical = b"\x1f".join((pair, data_source.encode(), ability.encode(), extra_json))
    # normalize's NUL check; without a backslash (one memchr) there is no \u0000 to look for
    if (canonical.find(b"\\") >= 0 and canonical.find(b"\\u0000") >= 0) or "\x00" in data_source \
            or "\x00" in ability or "\x00" in ground_truth:
        return None
    if chosen is not None and chosen_json == rejected_json:
        return None
    return Row(prompt=prompt, chosen=chosen, rejected=rejected, ground_truth=ground_truth,
               data_source=data_source, ability=ability, extra_info=extra, split=split, prompt_text=prompt,
               chosen_text=chosen or "", rejected_text=rejected or "", row_hash=_sha256(pair).hexdigest(),
               json=None, canonical=canonical, raw={"prompt": prompt_json, "chosen": chosen_json,
                                         "rejected": rejected_json, "extra_info": extra_json})


# ---- PostgreSQL COPY text lines ------------------------------------------------------------------------

# The column order of `copy_line`: the text columns, then the JSON columns, come last.
LINE_COLUMNS = ("version_id", "index", "source_line", "split", "prompt_chars", "chosen_chars", "rejected_chars",
                "row_hash", "data_source", "ability", "ground_truth", "prompt_text", "chosen_text", "rejected_text",
                "prompt", "chosen", "rejected", "extra_info")


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _copy_text(js: bytes) -> bytes | None:
    """The COPY text of a JSON string's text, or None.

    A JSON string's body is already COPY text (\\\\ \\n \\r \\t \\b \\f mean the same in both, and COPY reads \\" as
    "), unless it holds a \\uXXXX escape (a control character), which COPY does not know: None then. Most text
    has no backslash at all, which one memchr finds (`in` with a two-byte needle costs ten times more).
    """
    if js.find(b"\\") >= 0 and js.find(b"\\u") >= 0:
        return None
    return js[1:-1]


def copy_line(version_id: int, index: int, source_line: int, split: str, row: Row) -> bytes:
    """One row in COPY's text format, built with a few C-level string passes instead of per-field calls.

    Rows from the fast path reuse their JSON bytes: a JSON string's body is the COPY text of the same
    text, and the JSON itself only needs its backslashes doubled (JSON holds no raw control characters).
    Otherwise no stored text holds a NUL (normalize rejects it), so NUL separates the text fields while
    the whole group is escaped at once (backslash, newline, carriage return, tab), then becomes the tab.
    """
    raw = row.raw
    if raw is not None and type(row.prompt) is str:
        fast = _copy_line_bytes(version_id, index, source_line, split, row, raw)
        if fast is not None:
            return fast
    texts = "\x00".join((row.data_source, row.ability, row.ground_truth, row.prompt_text, row.chosen_text,
                         row.rejected_text))
    texts = _escape(texts).replace("\x00", "\t")
    prompt, chosen, rejected = (_copy_json(row.column_json(name)) for name in ("prompt", "chosen", "rejected"))
    return (f"{version_id}\t{index}\t{source_line}\t{split}\t{len(row.prompt_text)}\t{len(row.chosen_text)}\t"
            f"{len(row.rejected_text)}\t{row.row_hash}\t{texts}\t{prompt}\t{chosen}\t{rejected}\t"
            f"{_copy_json(row.json_texts()['extra_info'])}\n").encode()


def _copy_line_bytes(version_id: int, index: int, source_line: int, split: str, row: Row,
                     raw: dict[str, bytes]) -> bytes | None:
    prompt = _copy_text(raw["prompt"])
    if row.chosen is not None:
        chosen, rejected = _copy_text(raw["chosen"]), _copy_text(raw["rejected"])
    else:
        chosen = rejected = b""
    if prompt is None or chosen is None or rejected is None:
        return None
    meta = _escape("\x00".join((row.data_source, row.ability, row.ground_truth))).replace("\x00", "\t")
    head = (f"{version_id}\t{index}\t{source_line}\t{split}\t{len(row.prompt_text)}\t{len(row.chosen_text)}\t"
            f"{len(row.rejected_text)}\t{row.row_hash}\t{meta}\t").encode()
    # Fast-path strings are never empty, so their JSON columns are NULL: the text columns hold them
    # (`shapes.stored_json`).
    return b"".join((head, prompt, b"\t", chosen, b"\t", rejected, b"\t\\N\t\\N\t\\N\t",
                     raw["extra_info"].replace(b"\\", b"\\\\"), b"\n"))


def _copy_json(js: str | None) -> str:
    """A JSON column's COPY field: JSON holds no raw control characters, so only its backslashes double."""
    return "\\N" if js is None else js.replace("\\", "\\\\")
