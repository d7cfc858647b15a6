"""Format sniffing and the streaming readers (no database)."""
from __future__ import annotations

import gzip
import json
import tracemalloc

import pytest

from webapp.datasets.parsing import FileError, check_size, open_source, peek, sniff_format


def records(path, filename=""):
    return list(open_source(path, filename))


def test_jsonl_rows_with_line_numbers_and_blank_lines(write):
    path = write("a.jsonl", '{"prompt": "p", "chosen": "c", "rejected": "r"}\n\n{"prompt": "q"}\n')
    recs = records(path)
    assert [(r.number, r.line) for r in recs] == [(1, 1), (2, 3)]
    assert recs[1].data == {"prompt": "q"}


def test_jsonl_bad_lines_are_row_errors_not_file_errors(write):
    path = write("a.jsonl", b'{"a": 1}\n{"a": \n[1, 2]\n{"a": "\xff\xfe"}\n{"a": 2}\n')
    recs = records(path)
    assert [r.error is None for r in recs] == [True, False, False, False, True]
    assert "malformed JSON" in recs[1].error and recs[1].line == 2
    assert recs[2].error == "expected a JSON object, got a list"
    assert "invalid UTF-8" in recs[3].error and "0xff" in recs[3].error


def test_json_array_is_streamed_in_small_chunks(write, monkeypatch):
    rows = [{"prompt": f"p{i} " + "x" * (i * 7 % 50), "n": i} for i in range(300)]
    path = write("a.json", json.dumps(rows, indent=2))
    source = open_source(path)
    monkeypatch.setattr(source._reader, "chunk", 97)  # elements straddle many chunk boundaries
    got = list(source)
    assert [r.data for r in got] == rows
    assert got[0].line == 2 and got[1].line > got[0].line
    assert source.fraction_read == 1.0


def test_json_array_reports_non_objects_and_invalid_utf8_per_row(write):
    path = write("a.json", b'[{"a": 1}, 5, {"a": "\xc3\x28"}, {"a": 2}]')
    recs = records(path)
    assert [r.error for r in recs] == [None, "expected a JSON object, got a number", "invalid UTF-8 in this row", None]


def test_json_array_broken_element_is_a_file_error_with_its_row(write):
    path = write("a.json", '[\n{"a": 1},\n{"a": 2 "b": 3},\n{"a": 4}\n]')
    with pytest.raises(FileError) as exc:
        records(path)
    assert exc.value.code == "malformed" and "Row 2 (line 3)" in exc.value.message


def test_json_array_cut_short(write):
    with pytest.raises(FileError, match="cut short|not valid JSON"):
        records(write("a.json", '[{"a": 1}, {"a": 2}'))


def test_csv_with_bom_crlf_quoted_newlines_and_line_numbers(write):
    data = '\ufeffprompt,chosen,rejected\r\n"multi\r\nline",yes,no\r\nq2,"a, b",c\r\n\r\n'.encode()
    path = write("a.csv", data)
    source = open_source(path)
    assert source.format == "csv" and source.columns == ["prompt", "chosen", "rejected"]
    recs = list(source)
    assert recs[0].data == {"prompt": "multi\r\nline", "chosen": "yes", "rejected": "no"}
    assert (recs[0].line, recs[1].line) == (2, 4)
    assert recs[1].data["chosen"] == "a, b"


def test_csv_old_mac_line_endings_and_tabs(write):
    recs = records(write("a.tsv", b"prompt\tground_truth\rq1\t1\rq2\t2\r"))
    assert [r.data for r in recs] == [{"prompt": "q1", "ground_truth": "1"}, {"prompt": "q2", "ground_truth": "2"}]


def test_csv_long_cells_width_errors_and_bad_utf8(write):
    long = "x" * 300_000  # over the csv module's default 128 KiB field limit
    path = write("a.csv", f"prompt,ground_truth\n{long},1\nonly-one-field\nq,\xff\n".encode("latin-1"))
    recs = records(path)
    assert recs[0].data["prompt"] == long
    assert recs[1].error == "has 1 fields; the header has 2"
    assert recs[2].error == "invalid UTF-8 in this row"


def test_csv_header_problems(write):
    with pytest.raises(FileError, match="repeats column names: a"):
        open_source(write("a.csv", "a,a\n1,2\n"))
    with pytest.raises(FileError, match="empty column name"):
        open_source(write("b.csv", "a,,c\n1,2,3\n"))


def test_parquet_rows_by_batches(write):
    rows = [{"prompt": f"p{i}", "reward_model": {"ground_truth": str(i), "style": "rule"}} for i in range(2500)]
    source = open_source(write("a.parquet", rows))
    assert source.format == "parquet" and source.columns == ["prompt", "reward_model"]
    got = list(source)
    assert len(got) == 2500 and got[-1].data == rows[-1] and got[-1].number == 2500 and got[-1].line is None


@pytest.mark.parametrize("content,code,words", [
    (b"", "empty", "empty"),
    (b"  \n\n \r\n", "empty", "blank"),
    (gzip.compress(b'{"a": 1}\n', mtime=0), "binary", "gzip"),
    (bytes(range(256)) * 8, "binary", "binary data"),
    ('{"a": 1}\n'.encode("utf-16"), "encoding", "UTF-16"),
    (b"just some words without structure\n", "unknown_format", "Could not recognise"),
    (b'{\n  "data": [1, 2]\n}\n', "malformed", "pretty-printed"),
])
def test_file_level_errors_have_specific_messages(write, content, code, words):
    with pytest.raises(FileError) as exc:
        sniff_format(write("x.bin", content))
    assert exc.value.code == code and words in exc.value.message


def test_content_decides_the_format_and_a_wrong_extension_is_named(write):
    csv_named_json = write("data.json", "prompt,chosen,rejected\na,b,c\n")
    with pytest.raises(FileError) as exc:
        sniff_format(csv_named_json)
    assert exc.value.code == "wrong_extension"
    assert "named 'data.json' but its content is CSV" in exc.value.message
    assert "prompt,chosen,rejected" in exc.value.message
    assert sniff_format(write("rows.json", '{"a": 1}\n{"a": 2}\n')) == "jsonl"  # JSON family: fine
    assert sniff_format(write("rows.txt", "[{\"a\": 1}]")) == "json"  # unknown extension: content decides
    parquet = write("p.parquet", [{"a": 1}])
    with pytest.raises(FileError, match="named 'p.csv' but its content is Parquet"):
        sniff_format(parquet, "p.csv")


def test_size_limit():
    check_size(5 * 1024 * 1024, 5)
    with pytest.raises(FileError, match="the limit is 5 MB"):
        check_size(5 * 1024 * 1024 + 1, 5)


def test_peek_gives_columns_in_order_of_appearance(write):
    source = open_source(write("a.jsonl", [{"b": 1, "a": 2}, {"c": 3}]))
    recs, cols = peek(source, 10)
    assert cols == ["b", "a", "c"] and len(recs) == 2


@pytest.mark.parametrize("name", ["big.jsonl", "big.json"])
def test_memory_stays_bounded_while_streaming(write, name):
    row = {"prompt": "p" * 200, "chosen": "c" * 300, "rejected": "r" * 300}
    n = 12_000  # ~10 MB
    if name.endswith(".json"):
        path = write(name, "[" + ",\n".join(json.dumps(row) for _ in range(n)) + "]")
    else:
        path = write(name, [row] * n)
    assert path.stat().st_size > 9_000_000
    tracemalloc.start()
    count = sum(1 for _ in open_source(path))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count == n
    assert peak < 6_000_000, f"peak {peak / 1e6:.1f} MB for a {path.stat().st_size / 1e6:.0f} MB file"
