"""The Parquet reader: sizes checked from the footer and the dictionaries before anything is decoded."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from webapp.datasets.parsing import FileError, Record, _short


def _setting(name: str, default: int) -> int:
    from django.conf import settings

    return int(getattr(settings, name, default))


class ParquetReader:
    """Parquet by batches, with its sizes checked before anything is decoded.

    The metadata's uncompressed sizes are checked when the file is opened. Dictionary encoding hides
    the rest (a 1 MB value referenced by a million rows is a few kB on disk and 1 TB decoded), so
    text columns are read as dictionaries and each row's decoded size is computed from them first:
    a cell longer than any valid field becomes a bad row unbuilt, rows are built a slice of at most
    SLICE_BYTES at a time, and a file whose rows add up past the limit is refused.
    """

    batch_rows = 1024
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
            # every text leaf, nested ones (chat messages) included, stays a dictionary until a slice is built
            texts = [meta.schema.column(i).path for i in range(meta.num_columns)
                     if meta.schema.column(i).physical_type == "BYTE_ARRAY"]
            self.file = pq.ParquetFile(path, read_dictionary=texts)
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

        number, self.done, decoded = 0, 0, 0
        try:
            for batch in self.file.iter_batches(batch_size=self.batch_rows, use_threads=False):
                sizes, biggest = _row_sizes(batch)
                decoded += int(sizes.sum())
                if decoded > self.max_bytes:
                    raise FileError("too_large", f"This Parquet file expands to more than "
                                                 f"{self.max_bytes // 1024 // 1024:,} MB once decoded (by row "
                                                 f"{number + len(batch):,}); the limit is "
                                                 "DATASET_MAX_UNCOMPRESSED_MB. Split it into smaller files.")
                start = 0
                while start < len(batch):
                    if biggest[0][start] > self.max_cell:
                        number += 1
                        self.done = number
                        column = self.columns[biggest[1][start]]
                        yield Record(number, None, None, f"the value in column '{column}' holds "
                                                         f"{biggest[0][start] / 1024 / 1024:.1f} MB once decoded, "
                                                         "longer than any field may be")
                        start += 1
                        continue
                    end, total = start + 1, sizes[start]
                    while end < len(batch) and biggest[0][end] <= self.max_cell \
                            and total + sizes[end] <= self.SLICE_BYTES:
                        total += sizes[end]
                        end += 1
                    for row in batch.slice(start, end - start).to_pylist():
                        number += 1
                        self.done = number
                        yield Record(number, None, row)
                    start = end
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
        lengths = _cell_bytes(arr.dictionary)
        idx = arr.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        out = lengths[idx] if len(lengths) else np.zeros(len(arr), dtype=np.int64)
        return np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, out)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        inner = np.concatenate([[0], np.cumsum(_cell_bytes(arr.values))])
        return inner[offsets[1:]] - inner[offsets[:-1]] + 8
    if pa.types.is_struct(t):
        total = np.full(len(arr), 8, dtype=np.int64)
        for child in arr.flatten():
            total += _cell_bytes(child)
        return total
    return np.full(len(arr), 8, dtype=np.int64)
