"""Parquet bombs: sizes are checked from the metadata before reading, and a dictionary that would
expand a few bytes into gigabytes is caught before its values are decoded."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webapp.datasets.parsing import FileError, open_source

MB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[3]


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


def _bomb(path, rows: int = 1000):
    """`rows` rows pointing at one 1 MB dictionary value: under 1 kB on disk, `rows` MB decoded."""
    values = pa.array(["y" * MB] * rows).dictionary_encode()
    # without the Arrow schema in the file, a reader gets plain text back: the values decoded in full
    pq.write_table(pa.table({"prompt": values, "ground_truth": ["1"] * rows}), path, compression="zstd",
                   store_schema=False)
    assert path.stat().st_size < 5000
    return path


def _capped(code: str, memory_mb: int) -> subprocess.CompletedProcess:
    """Run `code` in a Python whose writable memory is capped, as the import worker's child is."""
    prelude = (f"import resource; resource.setrlimit(resource.RLIMIT_DATA, ({memory_mb * MB}, {memory_mb * MB}))\n"
               "from webapp.datasets.parsing import FileError, open_source, peek\n")
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_web_requests_preview_of_a_dictionary_bomb_stays_small(tmp_path):
    """The preview (the first rows, read in the web request) computes each row's size from the
    dictionary: a cell longer than any valid field is a bad row that is never built."""
    path = _bomb(tmp_path / "bomb.parquet")
    out = _capped(f"recs, _ = peek(open_source({str(path)!r}), 50)\n"
                  "print(len(recs), sum(r.data is None for r in recs), recs[0].error)", memory_mb=400)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("50 50 the value in column 'prompt' holds 1.0 MB once decoded")


def test_a_bomb_read_under_the_workers_cap_fails_with_a_clear_error(tmp_path):
    path = _bomb(tmp_path / "bomb.parquet")
    out = _capped(f"try:\n    list(open_source({str(path)!r}))\n"
                  "except FileError as exc:\n    print(exc.code, exc.message)", memory_mb=400)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("too_large") and "more memory than an import may use" in out.stdout


def test_a_file_that_decodes_past_the_limit_is_refused(tmp_path, settings):
    settings.DATASET_MAX_TEXT_CHARS = 2 * MB  # rows this long are allowed, but not 200 MB of them
    settings.DATASET_MAX_UNCOMPRESSED_MB = 100
    with pytest.raises(FileError, match="more than 100 MB once decoded") as err:
        list(open_source(_bomb(tmp_path / "bomb.parquet", rows=200)))
    assert err.value.code == "too_large"


def test_ordinary_files_with_long_rows_still_read(tmp_path):
    rows = [{"prompt": f"{i} " + "z" * 20_000, "ground_truth": str(i)} for i in range(300)]
    path = tmp_path / "ok.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert [r.data for r in open_source(path)] == rows
