"""The import service against the database: formats, all-or-nothing, reports, versions, splits."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.core.models import AuditLog
from webapp.datasets.models import Dataset, DatasetImport, DatasetRow, DatasetVersion, ImportStatus, VersionStatus
from webapp.datasets.services import ImportFailed, dataset_import, import_run, imports_cleanup_stale

pytestmark = pytest.mark.django_db


def run(project, user, path, name="ds", **kw):
    return dataset_import(project=project, user=user, name=name, path=path, **kw)


def stored(version):
    return [(r.prompt, r.chosen, r.rejected, r.ground_truth, r.data_source)
            for r in DatasetRow.objects.filter(version=version).order_by("index")]


def nothing_left(name="ds"):
    return (not Dataset.objects.filter(name=name).exists() and not DatasetVersion.objects.exists()
            and not DatasetRow.objects.exists())


def test_jsonl_import_stores_rows_hash_split_and_audit(project, engineer, write, pairs):
    version = run(project, engineer, write("p.jsonl", pairs), split="1")
    assert version.status == VersionStatus.READY and version.number == 1 and version.row_count == 4
    assert (version.train_count, version.val_count) == (3, 1)
    assert version.source_format == "jsonl" and version.detected_shape == "trl_standard"
    assert len(version.content_hash) == 64
    assert stored(version) == [(p["prompt"], p["chosen"], p["rejected"], "", p["data_source"]) for p in pairs]
    row = DatasetRow.objects.get(version=version, index=1)
    assert (row.source_line, row.prompt_chars, row.chosen_text) == (2, len("Capital of France?"), "Paris")
    assert DatasetRow.objects.filter(version=version, split="val").count() == 1
    record = DatasetImport.objects.get(version=version)
    assert record.status == ImportStatus.SUCCEEDED and record.progress == 1.0
    assert AuditLog.objects.filter(action="dataset.import", object_id=str(version.pk)).exists()


def test_json_array_csv_and_parquet_give_the_same_rows(project, engineer, write, pairs):
    versions = [run(project, engineer, write("p.json", pairs), name="a"),
                run(project, engineer, write("p.parquet", pairs), name="b")]
    header = "prompt,chosen,rejected,data_source\r\n"
    body = "".join(f'"{p["prompt"]}",{p["chosen"]},{p["rejected"]},{p["data_source"]}\r\n' for p in pairs)
    versions.append(run(project, engineer, write("p.csv", ("\ufeff" + header + body).encode()), name="c"))
    assert [v.source_format for v in versions] == ["json", "parquet", "csv"]
    assert stored(versions[0]) == stored(versions[1]) == stored(versions[2])
    assert versions[0].content_hash == versions[1].content_hash == versions[2].content_hash


def test_verl_parquet_and_conversational_and_hh(project, engineer, write):
    verl = [{"data_source": "gsm8k", "prompt": [{"role": "user", "content": f"{i}+1?"}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
             "extra_info": {"split": "train", "index": i}}
            for i in range(5)]
    v = run(project, engineer, write("train.parquet", verl), name="verl")
    assert v.detected_shape == "verl" and v.dataset.kind == "prompts"
    assert stored(v)[0] == ("0+1?", None, None, "1", "gsm8k")
    conv = [{"chosen": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "good"}],
             "rejected": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "bad"}]}
            for i in range(3)]
    v = run(project, engineer, write("conv.jsonl", conv), name="conv")
    assert v.detected_shape == "trl_conversational"
    assert stored(v)[2][:3] == ([{"role": "user", "content": "q2"}], [{"role": "assistant", "content": "good"}],
                                [{"role": "assistant", "content": "bad"}])
    hh = [{"chosen": f"\n\nHuman: q{i}\n\nAssistant: yes", "rejected": f"\n\nHuman: q{i}\n\nAssistant: no"}
          for i in range(3)]
    v = run(project, engineer, write("hh.jsonl", hh), name="hh")
    assert v.detected_shape == "hh_rlhf" and stored(v)[0][:3] == ("\n\nHuman: q0\n\nAssistant:", " yes", " no")


def test_one_bad_row_stores_nothing_and_reports_every_bad_row(project, engineer, write, pairs):
    lines = [json.dumps(p) for p in pairs]
    lines.insert(1, '{"prompt": "x", "chosen": "same", "rejected": "same"}')
    lines.insert(3, "{not json")
    lines.append(json.dumps({"prompt": "y", "chosen": "ok"}))
    with pytest.raises(ImportFailed) as exc:
        run(project, engineer, write("bad.jsonl", "\n".join(lines) + "\n"))
    assert nothing_left()
    record = exc.value.record
    assert record.status == ImportStatus.FAILED and "3 of 7 rows are invalid" in record.error
    errors = record.report["errors"]
    assert [(e["line"], e["reason"]) for e in errors] == [
        (2, "chosen is identical to rejected"), (4, errors[1]["reason"]), (7, "missing rejected")]
    assert errors[1]["reason"].startswith("malformed JSON")
    with open(record.errors_path) as fh:
        assert len(fh.readlines()) == 3


def test_a_failed_new_version_leaves_the_existing_dataset_untouched(project, engineer, write, pairs):
    v1 = run(project, engineer, write("p.jsonl", pairs))
    with pytest.raises(ImportFailed):
        run(project, engineer, write("bad.jsonl", [*pairs, {"prompt": "q"}]))
    assert list(DatasetVersion.objects.values_list("number", flat=True)) == [1]
    assert DatasetRow.objects.filter(version=v1).count() == 4 and DatasetRow.objects.count() == 4


def test_rows_written_before_the_bad_row_are_deleted(project, engineer, write, pairs, monkeypatch):
    from webapp.datasets import ingest

    monkeypatch.setattr(ingest.RowWriter, "__init__", _small_batches(ingest.RowWriter.__init__))
    many = [{"prompt": f"q{i}", "chosen": "a", "rejected": "b"} for i in range(50)]
    with pytest.raises(ImportFailed):
        run(project, engineer, write("late-bad.jsonl", [*many, {"prompt": "q", "chosen": 1, "rejected": "b"}]))
    assert nothing_left()


def _small_batches(init):
    def patched(self, version_id, batch_size=5000, workers=2):
        init(self, version_id, batch_size=7, workers=workers)  # flush (commit) several batches before the bad row
    return patched


def test_skip_bad_rows_imports_the_rest_and_keeps_the_report(project, engineer, write, pairs):
    rows = [*pairs[:2], {"prompt": "bad", "chosen": "x", "rejected": "x"}, *pairs[2:]]
    version = run(project, engineer, write("p.jsonl", rows), skip_bad_rows=True)
    assert version.row_count == 4 and [r[0] for r in stored(version)] == [p["prompt"] for p in pairs]
    assert list(DatasetRow.objects.filter(version=version).values_list("source_line", flat=True)) == [1, 2, 4, 5]
    assert version.report["skipped"] == 1 and version.report["errors"][0]["line"] == 3


def test_exact_duplicates_are_imported_and_reported(project, engineer, write, pairs):
    rows = [pairs[0], pairs[1], pairs[0], {**pairs[0], "data_source": "other"}, pairs[1]]
    dups = run(project, engineer, write("d.jsonl", rows)).report["duplicates"]
    assert (dups["groups"], dups["rows"]) == (2, 3)
    assert dups["examples"][0] == {"count": 3, "indexes": [0, 2, 3], "lines": [1, 3, 4]}


def test_duplicate_examples_are_checked_by_their_full_hash(project, engineer, write, pairs):
    """Groups come from 64-bit hash prefixes; a row that only shares the prefix is not shown as a copy."""
    import numpy as np

    from webapp.datasets.ingest import duplicate_summary

    version = run(project, engineer, write("d.jsonl", [pairs[0], pairs[1], pairs[0]]))
    colliding = np.array([7, 7, 7], dtype=np.uint64).tobytes()  # rows 0 and 2 are copies, row 1 is not
    example = duplicate_summary(version.pk, colliding)["examples"][0]
    assert example == {"count": 2, "indexes": [0, 2], "lines": [1, 3]}


def test_mapping_and_new_versions_of_a_dataset(project, engineer, write):
    rows = [{"question": f"{i}+{i}=", "answer": 2 * i} for i in range(1, 21)]
    path = write("qa.csv", "question,answer\n" + "".join(f"{r['question']},{r['answer']}\n" for r in rows))
    with pytest.raises(ImportFailed) as exc:
        run(project, engineer, path)
    assert exc.value.code == "needs_mapping" and exc.value.details["suggested_map"]["prompt"] == "question"
    assert nothing_left()
    v1 = run(project, engineer, path, column_map={"prompt": "question", "ground_truth": "answer"})
    v2 = run(project, engineer, path, column_map={"prompt": "question", "ground_truth": "answer"}, split="25%",
             split_seed=7)
    assert (v1.number, v2.number, v1.dataset_id) == (1, 2, v2.dataset_id)
    assert v1.content_hash == v2.content_hash and v1.column_map == {"prompt": "question", "ground_truth": "answer"}
    assert (v2.train_count, v2.val_count) == (15, 5)
    assert stored(v1)[2] == ("3+3=", None, None, "6", "")


def test_split_is_seeded_and_reproducible(project, engineer, write):
    rows = [{"prompt": f"q{i}", "ground_truth": str(i)} for i in range(40)]
    path = write("p.jsonl", rows)

    def val(version):
        return list(DatasetRow.objects.filter(version=version, split="val").values_list("index", flat=True))

    a, b, c = (run(project, engineer, path, name=n, split="25%", split_seed=s)
               for n, s in (("a", 1), ("b", 1), ("c", 2)))
    assert len(val(a)) == 10 and val(a) == val(b) != val(c)
    with pytest.raises(ImportFailed, match="asks for 40 validation rows"):
        run(project, engineer, path, name="d", split="40")
    assert not Dataset.objects.filter(name="d").exists()


def test_a_split_column_in_the_file_is_kept(project, engineer, write, pairs):
    rows = [{**p, "split": s} for p, s in zip(pairs, ["train", "val", "train", "test"], strict=True)]
    version = run(project, engineer, write("p.jsonl", rows), split="0")
    assert (version.train_count, version.val_count) == (2, 2)
    assert list(DatasetRow.objects.filter(version=version).values_list("split", flat=True)) == [
        "train", "val", "train", "val"]


def test_wrong_kind_for_an_existing_dataset(project, engineer, write, pairs, prompt_rows):
    run(project, engineer, write("p.jsonl", pairs))
    with pytest.raises(ImportFailed, match="holds preference pairs but this file holds verifiable prompts"):
        run(project, engineer, write("q.jsonl", prompt_rows), kind="prompts")
    assert DatasetVersion.objects.count() == 1


@pytest.mark.parametrize("content,words", [
    (b"", "empty"),
    (b"\x00\x01\x02garbage" * 100, "binary"),
    (b"prompt,chosen,rejected\na,b,c\n", "named 'x.json' but its content is CSV"),
])
def test_file_errors_store_nothing(project, engineer, write, content, words):
    with pytest.raises(ImportFailed) as exc:
        run(project, engineer, write("x.json", content))
    assert words in exc.value.message and nothing_left()
    assert DatasetImport.objects.get().status == ImportStatus.FAILED


def test_parquet_with_wrong_columns_lists_them_and_suggests(project, engineer, write):
    with pytest.raises(ImportFailed) as exc:
        run(project, engineer, write("w.parquet", [{"query": "q", "solution": "s", "meta": 1}]))
    msg = exc.value.message
    assert "query, solution, meta" in msg and "Expected: prompt" in msg and "prompt=query,ground_truth=solution" in msg


def test_too_large_and_over_long_text(project, engineer, write, pairs, settings):
    settings.DATASET_MAX_TEXT_CHARS = 10
    with pytest.raises(ImportFailed) as exc:
        run(project, engineer, write("p.jsonl", pairs))
    assert "prompt is 12 characters long; the limit is 10" in exc.value.record.report["errors"][0]["reason"]
    settings.DATASET_MAX_UPLOAD_MB = 0
    with pytest.raises(ImportFailed, match="the limit is 0 MB"):
        run(project, engineer, write("p.jsonl", pairs))
    assert nothing_left()


def test_unexpected_errors_also_clean_up(project, engineer, write, pairs, monkeypatch):
    from webapp.datasets import ingest

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ingest, "duplicate_summary", boom)
    with pytest.raises(RuntimeError):
        run(project, engineer, write("p.jsonl", pairs))
    assert nothing_left()
    assert "disk full" in DatasetImport.objects.get().error


def test_progress_callback_reaches_one(project, engineer, write, pairs):
    seen = []
    run(project, engineer, write("p.jsonl", pairs), progress=lambda f, phase: seen.append((round(f, 2), phase)))
    assert seen[0] == (0.0, "reading") and seen[-1] == (1.0, "done")


def test_import_run_claims_once(project, engineer, write, pairs):
    path = write("p.jsonl", pairs)
    record = DatasetImport.objects.create(project=project, created_by=engineer, name="queued", filename="p.jsonl",
                                          upload_path=str(path), size_bytes=path.stat().st_size,
                                          options={"split": "0"}, status=ImportStatus.QUEUED)
    version = import_run(import_id=record.pk)
    assert version.row_count == 4 and not path.exists()  # the upload copy is removed afterwards
    assert import_run(import_id=record.pk) is None  # a redelivered task does nothing
    assert DatasetVersion.objects.count() == 1


def test_stale_imports_are_discarded(project, engineer, write, pairs):
    version = run(project, engineer, write("p.jsonl", pairs))
    dataset = Dataset.objects.create(project=project, name="half", kind="preference")
    stale = DatasetVersion.objects.create(dataset=dataset, number=1, status=VersionStatus.IMPORTING)
    DatasetRow.objects.create(version=stale, index=0, row_hash="x")
    old = timezone.now() - timedelta(hours=2)
    DatasetVersion.objects.filter(pk=stale.pk).update(updated_at=old)
    running = DatasetImport.objects.create(project=project, name="half", status=ImportStatus.RUNNING)
    DatasetImport.objects.filter(pk=running.pk).update(updated_at=old)
    upload = write("waiting/q.csv", "question\nx\n")
    waiting = DatasetImport.objects.create(project=project, name="w", status=ImportStatus.NEEDS_MAPPING,
                                           upload_path=str(upload))
    DatasetImport.objects.filter(pk=waiting.pk).update(updated_at=timezone.now() - timedelta(days=2))
    imports_cleanup_stale()
    waiting.refresh_from_db()
    assert waiting.status == ImportStatus.FAILED and not upload.exists() and waiting.upload_path == ""
    assert not DatasetVersion.objects.filter(pk=stale.pk).exists() and not Dataset.objects.filter(name="half").exists()
    assert DatasetRow.objects.filter(version=version).count() == 4
    running.refresh_from_db()
    assert running.status == ImportStatus.FAILED and "stopped unexpectedly" in running.error


def test_an_import_whose_version_is_discarded_while_it_runs_leaves_no_rows(project, engineer, write, pairs,
                                                                          monkeypatch):
    """Rows have no database foreign key (it was a third of an import's database work): the import itself makes
    sure none outlives a version the stale-import sweep discarded under it."""
    from webapp.datasets import ingest

    summary = ingest.duplicate_summary

    def sweep_meanwhile(version_id, prefixes):
        # The sweep deleted the rows written so far, then the version; these rows came in between.
        assert DatasetRow.objects.filter(version_id=version_id).count() == len(pairs)
        gone = DatasetVersion.objects.filter(pk=version_id)
        gone._raw_delete(gone.db)
        return summary(version_id, prefixes)

    monkeypatch.setattr(ingest, "duplicate_summary", sweep_meanwhile)
    with pytest.raises(ImportFailed, match="stopped while it ran") as failed:
        run(project, engineer, write("p.jsonl", pairs))
    assert failed.value.record.status == ImportStatus.FAILED and not DatasetRow.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_rows_are_committed_in_batches_and_still_all_or_nothing(project, engineer, write,
                                                                                     monkeypatch):
    """As in production (autocommit): on PostgreSQL, COPY threads with their own connections write the rows."""
    from webapp.datasets import ingest

    monkeypatch.setattr(ingest.RowWriter, "__init__", _small_batches(ingest.RowWriter.__init__))
    rows = [{"prompt": f"q{i}", "chosen": f"a{i}", "rejected": "b"} for i in range(60)]
    version = run(project, engineer, write("ok.jsonl", rows), split="6")
    assert DatasetRow.objects.filter(version=version).count() == 60 and version.val_count == 6
    assert sorted(DatasetRow.objects.filter(version=version).values_list("index", flat=True)) == list(range(60))
    with pytest.raises(ImportFailed):
        run(project, engineer, write("bad.jsonl", [*rows, {"prompt": "q"}]), name="bad")
    assert not Dataset.objects.filter(name="bad").exists() and DatasetRow.objects.count() == 60


@pytest.mark.django_db(transaction=True)
def test_a_database_error_in_a_copy_thread_fails_the_import_cleanly(project, engineer, write, monkeypatch):
    from django.db import connection

    from webapp.datasets import ingest

    if connection.vendor != "postgresql":
        pytest.skip("COPY threads are used on PostgreSQL only")

    def broken(conn, sql, batch, queued=False):
        raise RuntimeError("connection reset")

    monkeypatch.setattr(ingest, "_copy", broken)
    with pytest.raises(RuntimeError, match="connection reset"):
        run(project, engineer, write("ok.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "b"}]))
    assert not Dataset.objects.exists() and not DatasetRow.objects.exists()


def test_the_seeded_split_is_the_same_whether_the_row_count_is_known_up_front_or_not(project, engineer, write):
    rows = [{"prompt": f"q{i}", "ground_truth": str(i)} for i in range(30)]
    jsonl = write("a.jsonl", rows)  # line count known before reading: splits assigned while writing
    blank_lines = write("b.jsonl", "\n\n".join(json.dumps(r) for r in rows) + "\n\n")  # the count is off: fixed after
    csv_file = write("c.csv", "prompt,ground_truth\n" + "".join(f"q{i},{i}\n" for i in range(30)))  # no count
    bad_row = write("d.jsonl", [*rows[:10], {"prompt": "x"}, *rows[10:]])  # skipped row: fixed after

    def val(path, name, **kw):
        v = run(project, engineer, path, name=name, split="20%", split_seed=4, **kw)
        assert (v.train_count, v.val_count) == (24, 6)
        return list(DatasetRow.objects.filter(version=v, split="val").values_list("index", flat=True))

    expected = val(jsonl, "a")
    assert len(expected) == 6
    assert val(blank_lines, "b") == val(csv_file, "c") == val(bad_row, "d", skip_bad_rows=True) == expected
