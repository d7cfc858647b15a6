"""The plain-row fast path gives exactly normalize's row, and COPY lines store text exactly."""
from __future__ import annotations

import pytest

from webapp.datasets.fastrows import plain_normalizer
from webapp.datasets.shapes import RowError, detect_shape, normalize

TRICKY = ["back\\slash \\N \\t", "tab\there", "new\nline\r\ncrlf", "quote \" and ' and }{", "café 日本 \u2028 😀",
          "trailing space ", "\\", "\\.", "[not a message list", "ends with backslash\\",
          "controls \x01 \x08 \x0c \x7f", "backspace \x08 form feed \x0c",
          "\\u0041 is not an escape", 'quoted "\\n" text']
PLAIN_PAIRS = [{"prompt": f"q{i} {t}", "chosen": f"good {t}", "rejected": f"bad {i}", "data_source": f"s{i % 3}"}
               for i, t in enumerate(TRICKY)]
ODD_PAIRS = [
    {"prompt": "q", "chosen": "same", "rejected": "same"},  # identical responses
    {"prompt": "q", "chosen": "   ", "rejected": "b"},  # blank
    {"prompt": "", "chosen": "a", "rejected": "b"},  # empty prompt
    {"prompt": "q", "chosen": 3, "rejected": "b"},  # a number
    {"prompt": "q", "chosen": "a\x00", "rejected": "b"},  # NUL
    {"prompt": "q", "chosen": "a", "rejected": "b", "data_source": 7},
    {"prompt": "q", "chosen": "a", "rejected": "b", "data_source": "x" * 201},
    {"prompt": "q", "chosen": "a", "rejected": "b", "ability": "y" * 101},
    {"prompt": "q" * 300, "chosen": "a", "rejected": "b"},  # over max_chars
    {"prompt": "q", "chosen": "a", "rejected": "b", "id": 7, "tags": ["x"], "when": None},  # extra columns
    {"prompt": "q", "chosen": "a", "rejected": "b", "extra_info": {"k": 1}},
    {"prompt": "q", "chosen": "a", "rejected": "b", "extra_info": "not an object"},
    {"prompt": '  [{"role": "user", "content": "hi"}]', "chosen": "a", "rejected": "b"},
    {"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"},
    {"prompt": "literal \\u0000 text", "chosen": "a", "rejected": "b"},
]
PROMPTS = [{"prompt": f"p{i} {t}", "ground_truth": t, "ability": "math"} for i, t in enumerate(TRICKY)] + [
    {"prompt": "p", "ground_truth": "   "}, {"prompt": "p", "ground_truth": None}, {"prompt": "p", "ground_truth": 42},
    {"prompt": "p", "ground_truth": {"answer": 1}}, {"prompt": "p"}, {"prompt": None, "ground_truth": "1"},
    {"prompt": "p", "ground_truth": "1", "extra_info": {"index": 3}}, {"prompt": "p", "ground_truth": "1", "x": 1},
]


def _shape(rows, **kw):
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    return detect_shape(columns, rows, **kw)


def _outcome(data, shape, max_chars):
    try:
        return normalize(data, shape, max_chars)
    except RowError as exc:
        return exc


@pytest.mark.parametrize(("rows", "plain_rows"), [(PLAIN_PAIRS + ODD_PAIRS, PLAIN_PAIRS),
                                                  (PROMPTS, PROMPTS[:len(TRICKY)])])
def test_the_fast_path_returns_normalizes_row_or_leaves_the_record_to_it(rows, plain_rows):
    shape = _shape(rows)
    plain = plain_normalizer(shape, 200)
    assert plain is not None
    taken = 0
    for data in rows:
        fast = plain(data)
        full = _outcome(data, shape, 200)
        if fast is not None:
            taken += 1
            fast.json_texts()  # the fast path decodes its JSON only when a writer asks
            assert fast == full, data  # every field, the hash and the canonical bytes included
        if data in plain_rows:
            assert fast is not None, data  # plain rows do take the fast path
    assert taken >= len(plain_rows)


def test_a_mapped_file_and_its_extra_columns_take_the_fast_path_too():
    rows = [{"question": f"q{i}", "answer": str(i), "source": "gsm8k", "split": "test", "id": i} for i in range(5)]
    shape = _shape(rows, column_map={"prompt": "question", "ground_truth": "answer", "data_source": "source"})
    plain = plain_normalizer(shape, 1000)
    for data in rows:
        row = plain(data)
        assert row is not None and row.json_texts() and row == normalize(data, shape, 1000)
        assert row.split == "val" and row.extra_info == {"id": data["id"]}
    for split in ("Train", "nope", None, 1):  # anything but the plain spellings: normalize decides
        assert plain({**rows[0], "split": split}) is None


@pytest.mark.parametrize("rows", [PLAIN_PAIRS, PROMPTS[:len(TRICKY)]])
def test_a_copy_line_from_json_bytes_equals_the_one_escaped_from_text(rows):
    from dataclasses import replace

    from webapp.datasets.fastrows import copy_line

    plain = plain_normalizer(_shape(rows), 1000)
    for i, data in enumerate(rows):
        row = plain(data)
        assert row.raw is not None
        row.json_texts()  # what the slow line is built from
        fast, slow = copy_line(7, i, i + 1, "val", row), copy_line(7, i, i + 1, "val", replace(row, raw=None))
        assert copy_fields(fast) == copy_fields(slow), data
        assert copy_fields(fast)[11:14] == [row.prompt_text, row.chosen_text, row.rejected_text]


_COPY_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def copy_fields(line: bytes) -> list[str | None]:
    """What PostgreSQL reads from one line of COPY text (the escapes used here; \\N alone is NULL)."""
    fields = []
    for raw in line.decode().rstrip("\n").split("\t"):
        if raw == "\\N":
            fields.append(None)
            continue
        out, i = [], 0
        while i < len(raw):
            ch = raw[i]
            if ch == "\\" and i + 1 < len(raw):
                nxt = raw[i + 1]
                assert not nxt.isdigit() and nxt != "x", raw  # octal and hex escapes are never written
                out.append(_COPY_ESCAPES.get(nxt, nxt))
                i += 2
            else:
                out.append(ch)
                i += 1
        fields.append("".join(out))
    return fields


def test_shapes_without_a_plain_case_have_no_fast_path():
    verl = [{"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": "1"}}]
    hh = [{"chosen": "\n\nHuman: hi\n\nAssistant: yes", "rejected": "\n\nHuman: hi\n\nAssistant: no"}]
    assert plain_normalizer(_shape(verl), 100) is None
    assert plain_normalizer(_shape(hh), 100) is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("workers", [True, False])
def test_copy_lines_store_every_character_exactly(project, engineer, write, workers, monkeypatch):
    """On PostgreSQL rows go in as hand-built COPY text (from COPY threads, or the caller's connection)."""
    from django.db import connection

    from webapp.datasets import ingest
    from webapp.datasets.models import DatasetRow
    from webapp.datasets.services import dataset_import

    if connection.vendor != "postgresql":
        pytest.skip("COPY lines are used on PostgreSQL only")
    if not workers:
        monkeypatch.setattr(ingest, "_CopyWorkers", None)
        init = ingest.RowWriter.__init__
        monkeypatch.setattr(ingest.RowWriter, "__init__", lambda self, vid, **kw: init(self, vid, workers=0))
    rows = PLAIN_PAIRS + [{"prompt": [{"role": "user", "content": "tab\t\\ \n"}],
                           "chosen": [{"role": "assistant", "content": "a\\b"}],
                           "rejected": [{"role": "assistant", "content": "c\r"}], "extra_info": {"k": "v\\\t"}}]
    path = write("tricky.jsonl", rows)
    version = dataset_import(project=project, user=engineer, name="tricky", path=path, split="0")
    stored = list(DatasetRow.objects.filter(version=version).order_by("index"))
    assert len(stored) == len(rows)
    shape = _shape(rows)
    for data, row in zip(rows, stored, strict=True):
        expected = normalize(data, shape, 100_000)
        assert (row.prompt, row.chosen, row.rejected, row.extra_info) == (
            expected.prompt, expected.chosen, expected.rejected, expected.extra_info)
        assert (row.prompt_text, row.chosen_text, row.rejected_text, row.data_source, row.row_hash) == (
            expected.prompt_text, expected.chosen_text, expected.rejected_text, expected.data_source,
            expected.row_hash)
        assert row.prompt_chars == len(expected.prompt_text) and row.split == "train"
