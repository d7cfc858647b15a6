"""Streaming readers for dataset files: JSON Lines, JSON arrays, CSV and Parquet (no ORM here).

The format is sniffed from the content, never trusted from the file name; a name that disagrees
with the content is an error with a specific message. Each reader yields `Record`s one at a time,
so memory stays bounded whatever the file size: a bad record becomes a `Record` with an `error`,
a problem with the whole file raises `FileError`.
"""
from __future__ import annotations

import codecs
import csv
import io
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

FORMATS = ("jsonl", "json", "csv", "parquet")
FORMAT_LABELS = {"jsonl": "JSON Lines", "json": "a JSON array", "csv": "CSV", "parquet": "Parquet"}
_FAMILY = {"jsonl": "json", "json": "json", "csv": "csv", "parquet": "parquet"}
_EXT_FAMILY = {".jsonl": "json", ".ndjson": "json", ".json": "json", ".csv": "csv", ".tsv": "csv",
               ".parquet": "parquet", ".pq": "parquet"}
_MAGIC = {b"\x1f\x8b": "a gzip archive", b"PK\x03\x04": "a zip archive", b"BZh": "a bzip2 archive",
          b"\xfd7zXZ": "an xz archive", b"%PDF": "a PDF document", b"\x89PNG": "a PNG image",
          b"\xff\xd8\xff": "a JPEG image", b"SQLite format 3": "an SQLite database"}
HEAD_BYTES = 64 * 1024
# A JSON array element larger than this cannot be a dataset row: stop instead of buffering the file.
MAX_ELEMENT_CHARS = 32 * 1024 * 1024
_SURROGATES = re.compile("[\udc80-\udcff]")

# Raise the CSV cell limit (128 KiB by default) so long responses fit; the row check enforces ours.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


class FileError(Exception):
    """The file as a whole cannot be imported; `code` names the class, `details` helps the UI."""

    def __init__(self, code: str, message: str, **details: Any):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


@dataclass
class Record:
    number: int  # 1-based record number in the file (data rows only; a CSV header is not counted)
    line: int | None  # 1-based physical line where the record starts (None for Parquet)
    data: dict[str, Any] | None
    error: str | None = None

    @property
    def where(self) -> int:
        return self.line if self.line is not None else self.number


@dataclass
class Source:
    """An opened dataset file: its format, known columns and a record iterator with progress."""

    path: Path
    format: str
    size: int
    columns: list[str] | None = None  # known up front for CSV and Parquet
    _reader: Any = field(default=None, repr=False)

    def __iter__(self) -> Iterator[Record]:
        return iter(self._reader)

    @property
    def fraction_read(self) -> float:
        return self._reader.fraction() if self._reader is not None else 0.0

    def count_hint(self) -> int | None:
        """The record count when it is cheap to know before reading (JSONL lines, Parquet metadata).

        A hint only: blank lines make it too high, and callers must check it against what they read.
        """
        if self.format == "parquet":
            return self._reader.total
        if self.format != "jsonl":
            return None
        lines, last = 0, b"\n"
        with self.path.open("rb") as fh:
            while chunk := fh.read(4 * 1024 * 1024):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
        return lines + (last != b"\n")


def check_size(size: int, max_mb: int) -> None:
    if size > max_mb * 1024 * 1024:
        raise FileError("too_large", f"The file is {size / 1024 / 1024:,.0f} MB; the limit is {max_mb:,} MB "
                                     "(DATASET_MAX_UPLOAD_MB). Split it into smaller files and import them as "
                                     "versions, or ask an admin to raise the limit.")


def sniff_format(path: str | Path, filename: str = "") -> str:
    """Return 'jsonl', 'json', 'csv' or 'parquet' from the file's content, or raise FileError."""
    path = Path(path)
    size = path.stat().st_size
    if size == 0:
        raise FileError("empty", "The file is empty: there is nothing to import.")
    with path.open("rb") as fh:
        head = fh.read(HEAD_BYTES)
    fmt = _format_from_head(head, size)
    _check_extension(fmt, filename or path.name, head)
    return fmt


def _format_from_head(head: bytes, size: int) -> str:
    if head.startswith(b"PAR1"):
        return "parquet"
    for magic, what in _MAGIC.items():
        if head.startswith(magic):
            raise FileError("binary", f"This is {what}, not a dataset file. Unpack it and upload the JSON Lines, "
                                      "JSON, CSV or Parquet file inside.")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise FileError("encoding", "The file is UTF-16 encoded. Save it as UTF-8 and upload it again.")
    body = head[3:] if head.startswith(codecs.BOM_UTF8) else head
    if b"\x00" in body or _non_text_ratio(body) > 0.05:
        raise FileError("binary", "This file contains binary data, not text: expected JSON Lines, a JSON array, "
                                  "CSV or Parquet (first bytes: " + body[:8].hex(" ") + ").")
    text = body.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if not stripped:
        raise FileError("empty", "The file contains only blank lines: there is nothing to import.")
    if stripped[0] == "[":
        return "json"
    if stripped[0] == "{":
        lines = [ln for ln in text.splitlines()[:6] if ln.strip()]
        if len(head) < size:
            lines = lines[:-1] or lines  # the last line of a partial head may be cut
        for ln in lines[:5]:
            try:
                if isinstance(json.loads(ln), dict):
                    return "jsonl"
            except ValueError:
                continue
        raise FileError("malformed", "The file starts with '{' but none of its first lines is a complete JSON "
                                     "object. Expected JSON Lines (one object per line) or a JSON array of "
                                     "objects; a single pretty-printed JSON object is not a dataset.")
    first_line = stripped.splitlines()[0]
    if any(d in first_line for d in (",", "\t", ";")):
        return "csv"
    raise FileError("unknown_format", "Could not recognise the format: expected JSON Lines, a JSON array, CSV "
                                      f"(with a header row) or Parquet. The file starts with: {first_line[:80]!r}")


def _non_text_ratio(data: bytes) -> float:
    if not data:
        return 0.0
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\r\n\f")
    return bad / max(len(text), 1)


def _check_extension(fmt: str, filename: str, head: bytes) -> None:
    ext = Path(filename).suffix.lower()
    expected = _EXT_FAMILY.get(ext)
    if expected is None or expected == _FAMILY[fmt]:
        return
    what = FORMAT_LABELS[fmt]
    hint = ""
    if fmt == "csv":
        header = head.decode("utf-8", errors="replace").lstrip("\ufeff").splitlines()[0][:80]
        hint = f" (its first line is {header!r})"
    raise FileError("wrong_extension", f"This file is named '{Path(filename).name}' but its content is {what}"
                                       f"{hint}. Rename it to the right extension, or export it again as "
                                       f"{ext.lstrip('.').upper()}.", detected=fmt)


def open_source(path: str | Path, filename: str = "") -> Source:
    """Sniff the format and return a Source ready to iterate."""
    path = Path(path)
    fmt = sniff_format(path, filename)
    size = path.stat().st_size
    if fmt == "jsonl":
        return Source(path, fmt, size, None, _JsonLinesReader(path, size))
    if fmt == "json":
        return Source(path, fmt, size, None, _JsonArrayReader(path, size))
    if fmt == "csv":
        reader = _CsvReader(path, size)
        return Source(path, fmt, size, reader.header, reader)
    from webapp.datasets.parquet import ParquetReader

    reader = ParquetReader(path)
    return Source(path, fmt, size, reader.columns, reader)


def _utf8_reason(raw: bytes) -> str | None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at position {exc.start} of the line)"
    return None


def _json_reason(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    """Where in the line the JSON breaks; the record's line number is reported once, next to the reason
    (the decoder's own "line 2 column 1" counts lines inside this one record and only confuses)."""
    end = len(raw.rstrip(b"\r\n").decode("utf-8", "replace"))
    where = "at the end of the line" if exc.pos >= end else f"at character {exc.pos + 1}"
    return f"malformed JSON: {_short(exc.msg, 120)} {where}"


class _JsonLinesReader:
    def __init__(self, path: Path, size: int):
        self.path, self.size, self.pos = path, size, 0

    def fraction(self) -> float:
        return min(self.pos / self.size, 1.0) if self.size else 1.0

    def __iter__(self) -> Iterator[Record]:
        number, self.pos = 0, 0
        with self.path.open("rb", buffering=1024 * 1024) as fh:
            for lineno, raw in enumerate(fh, 1):
                self.pos += len(raw)
                if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[3:]
                if raw[:1] <= b" " and not raw.strip():  # blank (strip copies the line: only when it may be blank)
                    continue
                number += 1
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    reason = _utf8_reason(raw) or _json_reason(raw, exc)
                    yield Record(number, lineno, None, reason)
                    continue
                if not isinstance(obj, dict):
                    yield Record(number, lineno, None, f"expected a JSON object, got {_type_name(obj)}")
                    continue
                yield Record(number, lineno, obj)


class _JsonArrayReader:
    """Incremental parse of `[ {...}, {...} ]`: one element in memory at a time."""

    chunk = 1024 * 1024
    max_element_chars = MAX_ELEMENT_CHARS

    def __init__(self, path: Path, size: int):
        self.path, self.size, self.pos = path, size, 0

    def fraction(self) -> float:
        return min(self.pos / self.size, 1.0) if self.size else 1.0

    def __iter__(self) -> Iterator[Record]:
        self.pos = 0
        with self.path.open("rb") as fh:
            cur = _JsonCursor(self, fh)
            cur.more(self.chunk)
            cur.skip_ws()
            if cur.peek() != "[":
                raise FileError("malformed", "A JSON file must hold an array of objects: it should start with '['.")
            cur.i += 1
            number = 0
            cur.skip_ws()
            if cur.peek() == "]":
                return
            while True:
                cur.skip_ws()
                start_line, number = cur.line, number + 1
                obj, text_span = cur.element(number, start_line)
                if _SURROGATES.search(text_span):
                    yield Record(number, start_line, None, "invalid UTF-8 in this row")
                elif not isinstance(obj, dict):
                    yield Record(number, start_line, None, f"expected a JSON object, got {_type_name(obj)}")
                else:
                    yield Record(number, start_line, obj)
                cur.skip_ws()
                if cur.peek() == ",":
                    cur.i += 1
                    continue
                if cur.peek() == "]":
                    return
                raise FileError("malformed", f"Expected ',' or ']' after row {number} (line {cur.line}): the JSON "
                                             "array is cut short or malformed.", line=cur.line)


class _JsonCursor:
    """Where `_JsonArrayReader` stands in its file: the decoded text read so far, the index and line in it."""

    def __init__(self, reader: _JsonArrayReader, fh: Any):
        self.reader, self.fh = reader, fh
        # surrogateescape keeps invalid bytes as lone surrogates, so they are reported per element.
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.decoder = json.JSONDecoder()
        self.buf, self.i, self.eof, self.line = "", 0, False, 1

    def peek(self) -> str | None:
        return self.buf[self.i] if self.i < len(self.buf) else None

    def more(self, n: int) -> None:
        """Read n more bytes, dropping the text already consumed."""
        data = self.fh.read(n)
        self.reader.pos += len(data)
        self.eof = not data
        if self.i > 0:
            self.buf, self.i = self.buf[self.i:], 0
        self.buf += self.utf8.decode(data, final=self.eof)

    def skip_ws(self) -> None:
        while True:
            j = self.i
            while j < len(self.buf) and self.buf[j] in " \t\r\n\ufeff":
                j += 1
            self.line += self.buf.count("\n", self.i, j)
            self.i = j
            if self.i < len(self.buf) or self.eof:
                return
            self.more(self.reader.chunk)

    def element(self, number: int, start_line: int) -> tuple[Any, str]:
        """Decode the array element that starts here (reading on while it may be cut); (value, its text)."""
        limit = self.reader.max_element_chars
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.i)
                if end < len(self.buf) or self.eof:
                    break  # a value ending exactly at the buffer's end may be cut (a number)
            except json.JSONDecodeError as exc:
                maybe_cut = exc.pos >= len(self.buf) - 16 or exc.msg.startswith("Unterminated string")
                if self.eof or not maybe_cut:
                    where = start_line + self.buf.count("\n", self.i, exc.pos)
                    raise FileError("malformed", f"Row {number} (line {where}) is not valid JSON: {exc.msg}. "
                                                 "A JSON array cannot be read past a broken row; fix it "
                                                 "or export JSON Lines instead.", line=where) from None
                if len(self.buf) - self.i > limit:
                    raise FileError("malformed", f"Row {number} (line {start_line}) is over "
                                                 f"{limit:,} characters or never ends.") from None
            self.more(max(self.reader.chunk, len(self.buf) - self.i))
        text_span = self.buf[self.i:end]
        self.line += text_span.count("\n")
        self.i = end
        return obj, text_span


class _CsvReader:
    def __init__(self, path: Path, size: int):
        self.path, self.size = path, size
        self._fh = None
        with path.open("rb") as fb:
            text = io.TextIOWrapper(fb, encoding="utf-8-sig", errors="surrogateescape", newline="")
            first = text.readline()
        self.delimiter = max((",", "\t", ";"), key=first.count)
        header = next(csv.reader([first.rstrip("\r\n")], delimiter=self.delimiter), [])
        self.header = [h.strip() for h in header]
        if _SURROGATES.search(first):
            raise FileError("encoding", "The CSV header row is not valid UTF-8. Save the file as UTF-8.")
        if any(not h for h in self.header):
            raise FileError("bad_header", f"The CSV header has an empty column name: {self.header}. "
                                          "Every column needs a name.")
        dupes = sorted({h for h in self.header if self.header.count(h) > 1})
        if dupes:
            raise FileError("bad_header", f"The CSV header repeats column names: {', '.join(dupes)}.")

    def fraction(self) -> float:
        if self._fh is None or not self.size:
            return 0.0
        try:
            return min(self._fh.tell() / self.size, 1.0)
        except (OSError, ValueError):
            return 1.0

    def __iter__(self) -> Iterator[Record]:
        width = len(self.header)
        with self.path.open("rb") as fb:
            self._fh = fb
            text = io.TextIOWrapper(fb, encoding="utf-8-sig", errors="surrogateescape", newline="")
            reader = csv.reader(text, delimiter=self.delimiter)
            next(reader, None)
            prev, number = reader.line_num, 0
            while True:
                try:
                    fields = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    number += 1
                    yield Record(number, prev + 1, None, f"malformed CSV ({exc})")
                    prev = reader.line_num
                    continue
                start, prev = prev + 1, reader.line_num
                if not fields or not any(f.strip() for f in fields):
                    continue
                number += 1
                if len(fields) != width:
                    yield Record(number, start, None, f"has {len(fields)} fields; the header has {width}")
                elif any(_SURROGATES.search(f) for f in fields):
                    yield Record(number, start, None, "invalid UTF-8 in this row")
                else:
                    yield Record(number, start, dict(zip(self.header, fields, strict=True)))


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _short(message: str, limit: int = 160) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


def peek(source: Source, n: int = 50) -> tuple[list[Record], list[str]]:
    """Return the first `n` records (of a fresh iteration) and the columns seen in them, in order."""
    records: list[Record] = []
    columns: list[str] = list(source.columns or [])
    for rec in source:
        records.append(rec)
        if rec.data:
            for key in rec.data:
                if key not in columns:
                    columns.append(key)
        if len(records) >= n:
            break
    return records, columns
