"""The Parquet reader: sizes checked from the footer and the dictionaries before anything is decoded."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from webapp.datasets.parsing import FileError, Record, _short


def _setting(name: str, default: int) -> int:
    from django.conf import settings

    return int(getattr(settings, name, default)) if settings.configured else default


class ParquetReader:
    """Parquet by batches, with its sizes checked before rows are built.

    The metadata's uncompressed sizes are checked when the file is opened. Dictionary encoding hides
    the rest (a 1 MB value referenced by a million rows is a few kB on disk and 1 TB decoded). The
    first GUARDED_ROWS rows (all that the web request's preview reads) come from text columns read
    as dictionaries, so their decoded size is known before any is decoded; the rest of the file is
    read plainly (reading dictionaries costs ~20x on text with many distinct values), on the worker
    under its memory cap. Either way each row's size is computed on the Arrow side first: a cell
    longer than any valid field becomes a bad row without being built, rows are built a slice of at
    most SLICE_BYTES at a time, and a file whose rows add up past the limit is refused.
    """

    batch_rows = 1024
    GUARDED_ROWS = 64
    SLICE_BYTES = 32 * 1024 * 1024

    def __init__(self, path: Path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path = path
        self.max_bytes = _setting("DATASET_MAX_UNCOMPRESSED_MB", 8192) * 1024 * 1024
        self.max_cell = 4 * _setting("DATASET_MAX_TEXT_CHARS", 100_000)  # UTF-8: at most 4 bytes a character
        try:
            meta = pq.read_metadata(path)
            check_parquet_metadata(meta, self.max_bytes)
            # every text leaf, nested ones (chat messages) included
            self.texts = [meta.schema.column(i).path for i in range(meta.num_columns)
                          if meta.schema.column(i).physical_type == "BYTE_ARRAY"]
            self.file = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as exc:
            raise FileError("malformed", f"This Parquet file cannot be read ({_short(str(exc))}); it may be "
                                         "truncated or corrupt.") from None
        self.columns = list(self.file.schema_arrow.names)
        self.total = self.file.metadata.num_rows
        self.done = 0

    def fraction(self) -> float:
        return min(self.done / self.total, 1.0) if self.total else 1.0

    def __iter__(self) -> Iterator[Record]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        number, self.done, decoded = 0, 0, 0
        guarded = pq.ParquetFile(self.path, read_dictionary=self.texts)

        def batches():
            first = next(guarded.iter_batches(batch_size=self.GUARDED_ROWS, use_threads=False), None)
            if first is None:
                return
            yield first
            skip = len(first)
            for batch in self.file.iter_batches(batch_size=self.batch_rows, use_threads=False):
                if skip:
                    batch, skip = batch.slice(min(skip, len(batch))), max(0, skip - len(batch))
                if len(batch):
                    yield batch

        try:
            for batch in batches():
                sizes, biggest = _row_sizes(batch)
                decoded += int(sizes.sum())
                if decoded > self.max_bytes:
                    raise FileError("too_large", f"This Parquet file expands to more than "
                                                 f"{self.max_bytes // 1024 // 1024:,} MB once decoded (by row "
                                                 f"{number + len(batch):,}); the limit is "
                                                 "DATASET_MAX_UNCOMPRESSED_MB. Split it into smaller files.")
                for start, end, bad in _slices(sizes, biggest[0] > self.max_cell, self.SLICE_BYTES):
                    if bad:
                        number += 1
                        self.done = number
                        column = self.columns[biggest[1][start]]
                        yield Record(number, None, None, f"the value in column '{column}' holds "
                                                         f"{biggest[0][start] / 1024 / 1024:.1f} MB once decoded, "
                                                         "longer than any field may be")
                        continue
                    for row in _plain(batch.slice(start, end - start)).to_pylist():
                        number += 1
                        self.done = number
                        yield Record(number, None, row)
        except MemoryError:  # before ArrowException: ArrowMemoryError is both
            raise FileError("too_large", f"Decoding this Parquet file near row {number + 1:,} needed more memory than "
                                         "an import may use (DATASET_IMPORT_MEMORY_MB). Split the file, or write it "
                                         "without repeating huge values.") from None
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise FileError("malformed", f"Reading the Parquet file failed near row {number + 1}: "
                                         f"{_short(str(exc))}") from None


def check_parquet_metadata(meta, max_bytes: int) -> None:
    """Refuse a file whose column chunks add up past `max_bytes` uncompressed (from the footer only)."""
    total = 0
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        total += max(group.total_byte_size,
                     sum(group.column(j).total_uncompressed_size for j in range(group.num_columns)))
    if total > max_bytes:
        raise FileError("too_large", f"This Parquet file holds {total / 1024 / 1024:,.0f} MB once uncompressed; "
                                     f"the limit is {max_bytes // 1024 // 1024:,} MB (DATASET_MAX_UNCOMPRESSED_MB). "
                                     "Split it into smaller files and import them as versions.")


def _slices(sizes, oversized, budget: int):
    """(start, end, bad) runs over a batch: an oversized row alone (bad), the others in runs of at most
    `budget` decoded bytes (a row bigger than that alone)."""
    import numpy as np

    n, start = len(sizes), 0
    bad_rows = np.flatnonzero(oversized)
    while start < n:
        if oversized[start]:
            yield start, start + 1, True
            start += 1
            continue
        after = np.searchsorted(bad_rows, start)
        stop = int(bad_rows[after]) if after < len(bad_rows) else n
        fits = int(np.searchsorted(np.cumsum(sizes[start:stop]), budget, side="right"))
        end = start + max(1, fits)
        yield start, end, False
        start = end


def _plain_type(t):
    """`t` with every dictionary replaced by its value type (lists and structs rebuilt around them)."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _plain_type(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        field = pa.field(t.value_field.name, _plain_type(t.value_type), t.value_field.nullable)
        return pa.list_(field) if pa.types.is_list(t) else pa.large_list(field)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type), f.nullable) for f in t])
    return t


def _plain(batch):
    """The slice with its dictionaries decoded: Arrow builds Python values from plain text ~20x faster."""
    import pyarrow as pa

    cols = [c.cast(_plain_type(c.type)) if _plain_type(c.type) != c.type else c for c in batch.columns]
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


def _row_sizes(batch):
    """Decoded bytes of each row, and of its largest cell (with that cell's column), without decoding."""
    import numpy as np

    n = len(batch)
    sizes = np.zeros(n, dtype=np.int64)
    big, big_col = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for i, col in enumerate(batch.columns):
        cell = _cell_bytes(col)
        sizes += cell
        larger = cell > big
        big[larger], big_col[larger] = cell[larger], i
    return sizes, (big, big_col)


def _cell_bytes(arr):
    """Bytes each element of `arr` takes once built as Python values, computed on the Arrow side.

    Text read as a dictionary counts the length of the value each index points at; lists add up
    their elements (by offsets), structs their fields; numbers and the like count 8 bytes.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_dictionary(t):
        lengths = pa.array(_cell_bytes(arr.dictionary), type=pa.int64())
        return np.asarray(pc.take(lengths, arr.indices).fill_null(0), dtype=np.int64)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return np.asarray(pc.binary_length(arr).fill_null(0), dtype=np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        inner = np.concatenate([[0], np.cumsum(_cell_bytes(arr.values))])
        return inner[offsets[1:]] - inner[offsets[:-1]] + 8
    if pa.types.is_struct(t):
        total = np.full(len(arr), 8, dtype=np.int64)
        for child in arr.flatten():
            total += _cell_bytes(child)
        return total
    return np.full(len(arr), 8, dtype=np.int64)
