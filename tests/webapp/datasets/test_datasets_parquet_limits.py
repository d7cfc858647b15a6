"""Parquet bombs: sizes are checked from the metadata before reading, and a dictionary that would
expand a few bytes into gigabytes is caught before its values are decoded."""
from __future__ import annotations

import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webapp.datasets.parsing import FileError, open_source

MB = 1024 * 1024


def test_the_uncompressed_size_in_the_metadata_is_checked_before_reading(tmp_path, settings):
    """zstd shrinks 300 MB of one repeated character to a few kB; the metadata still tells."""
    settings.DATASET_MAX_UNCOMPRESSED_MB = 100
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"prompt": ["x" * MB] * 300}), path, compression="zstd", use_dictionary=False)
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    with pytest.raises(FileError, match=r"300 MB once uncompressed.*limit is 100 MB") as err:
        open_source(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert err.value.code == "too_large" and peak < 20 * MB


def _bomb(path):
    """1,000 rows pointing at one 1 MB dictionary value: under 1 kB on disk, about 1 GB decoded."""
    values = pa.array(["y" * MB] * 1000).dictionary_encode()
    pq.write_table(pa.table({"prompt": values, "ground_truth": ["1"] * 1000}), path, compression="zstd")
    assert path.stat().st_size < 5000
    return path


def test_a_dictionary_bomb_is_not_decoded(tmp_path):
    """Each row's decoded size is computed from the dictionary first: a cell larger than any valid
    field (DATASET_MAX_TEXT_CHARS) is a bad row without its value ever being built."""
    source = open_source(_bomb(tmp_path / "bomb.parquet"))  # the metadata alone (a 1 MB dictionary) looks harmless
    tracemalloc.start()
    recs = list(source)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(recs) == 1000 and all(r.data is None for r in recs)
    assert "'prompt' holds 1.0 MB once decoded" in recs[0].error
    assert peak < 100 * MB, f"{peak / MB:.0f} MB traced"


def test_a_file_that_decodes_past_the_limit_is_refused(tmp_path, settings):
    settings.DATASET_MAX_TEXT_CHARS = 2 * MB  # rows this long are allowed, but not 1 GB of them
    settings.DATASET_MAX_UNCOMPRESSED_MB = 100
    source = open_source(_bomb(tmp_path / "bomb.parquet"))
    tracemalloc.start()
    with pytest.raises(FileError, match="more than 100 MB once decoded") as err:
        list(source)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert err.value.code == "too_large" and peak < 200 * MB, f"{peak / MB:.0f} MB traced"


def test_ordinary_files_with_long_rows_still_read(tmp_path):
    rows = [{"prompt": f"{i} " + "z" * 20_000, "ground_truth": str(i)} for i in range(300)]
    path = tmp_path / "ok.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert [r.data for r in open_source(path)] == rows
