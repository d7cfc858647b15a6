"""`manage.py import_dataset` and `manage.py export_dataset`."""
from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from webapp.datasets.models import Dataset, DatasetRow, DatasetVersion

pytestmark = pytest.mark.django_db


def cli(*args):
    from io import StringIO

    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_import_with_mapping_split_and_kind(project, write):
    path = write("qa.csv", "question,answer,src\nq1,1,a\nq2,2,b\nq3,3,a\nq4,4,b\n")
    out, _ = cli("import_dataset", str(path), "--project", "acme", "--name", "qa",
                 "--map", "prompt=question,ground_truth=answer,data_source=src", "--split", "1", "--kind", "prompts")
    assert "Imported 4 rows into qa v1 (3 train, 1 val; prompts, csv)" in out
    assert list(DatasetRow.objects.values_list("ground_truth", "data_source")) == [("1", "a"), ("2", "b"), ("3", "a"),
                                                                                   ("4", "b")]


def test_import_reports_bad_rows_and_stores_nothing(project, write, pairs):
    path = write("p.jsonl", [*pairs, {"prompt": "x", "chosen": "y"}])
    with pytest.raises(CommandError, match="1 of 5 rows are invalid"):
        cli("import_dataset", str(path), "--project", "acme", "--name", "p")
    assert not Dataset.objects.exists()
    out, _ = cli("import_dataset", str(path), "--project", "acme", "--name", "p", "--skip-bad-rows")
    assert "Imported 4 rows" in out and "skipped 1 bad row (first: line 5: missing rejected)" in out


@pytest.mark.parametrize("args,message", [
    (["--project", "nope", "--name", "x"], "There is no project 'nope'"),
    (["--project", "acme", "--name", "x", "--map", "prompt"], "--map: 'prompt' is not FIELD=COLUMN"),
    (["--project", "acme", "--name", "x", "--split", "ten"], "is not a split"),
    (["--project", "acme", "--name", "x", "--user", "ghost"], "There is no user 'ghost'"),
])
def test_import_argument_errors(project, write, pairs, args, message):
    with pytest.raises(CommandError, match=message):
        cli("import_dataset", str(write("p.jsonl", pairs)), *args)


def test_import_missing_file(project):
    with pytest.raises(CommandError, match="There is no file at /nowhere.jsonl"):
        cli("import_dataset", "/nowhere.jsonl", "--project", "acme", "--name", "x")


def test_export_by_name_or_id_with_version(project, write, pairs, tmp_path):
    cli("import_dataset", str(write("p.jsonl", pairs)), "--project", "acme", "--name", "p")
    cli("import_dataset", str(write("q.jsonl", pairs[:2])), "--project", "acme", "--name", "p")
    out, _ = cli("export_dataset", "p", "--format", "trl", "--out", str(tmp_path / "latest.jsonl"))
    assert "Wrote 2 rows of p v2" in out
    dataset_id = str(Dataset.objects.get().pk)
    out, _ = cli("export_dataset", dataset_id, "--format", "jsonl", "--out", str(tmp_path / "v1.jsonl"),
                 "--project", "acme", "--version", "1")
    assert "Wrote 4 rows of p v1" in out
    first = json.loads((tmp_path / "v1.jsonl").read_text().splitlines()[0])
    assert first == {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5", "data_source": "math", "ability": "",
                     "extra_info": {}, "split": first["split"]}
    out, _ = cli("export_dataset", "p", "--format", "verl", "--out", str(tmp_path / "p.parquet"))
    assert "VERL parquet" in out and (tmp_path / "p.parquet").stat().st_size > 0


def test_export_errors(project, write, pairs, tmp_path):
    from webapp.core.models import Project

    with pytest.raises(CommandError, match="There is no dataset 'ghost'"):
        cli("export_dataset", "ghost", "--format", "trl", "--out", str(tmp_path / "x"))
    cli("import_dataset", str(write("p.jsonl", pairs)), "--project", "acme", "--name", "p")
    with pytest.raises(CommandError, match="no version 7 of dataset 'p'"):
        cli("export_dataset", "p", "--format", "trl", "--out", str(tmp_path / "x"), "--version", "7")
    other = Project.objects.create(slug="other", name="Other")
    cli("import_dataset", str(write("p.jsonl", pairs)), "--project", "other", "--name", "p")
    with pytest.raises(CommandError, match="several projects \\(acme, other\\): pass --project"):
        cli("export_dataset", "p", "--format", "trl", "--out", str(tmp_path / "x"))
    assert DatasetVersion.objects.filter(dataset__project=other).count() == 1
