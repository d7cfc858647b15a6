"""A row's plain text is stored once: its JSON column is NULL and its text column holds the string. Every reader
(instances, the training selection, a derived version's content hash, the migration both ways) gets the value
the file held, and message lists stay JSON."""
from __future__ import annotations

import pytest
from django.db import connection

from tests.migration_support import migrate_app_to
from webapp.datasets.models import DatasetRow

CONVERSATION = {"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "assistant", "content": "yes"}],
                "rejected": [{"role": "assistant", "content": "no"}]}
PLAIN = [{"prompt": f"question {i} tab\t\\", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(6)]


def _json_columns(version) -> list[tuple]:
    """The JSON columns as the database holds them (the model would fill the plain ones in)."""
    with connection.cursor() as cursor:
        cursor.execute('SELECT prompt IS NULL, chosen IS NULL, rejected IS NULL FROM datasets_datasetrow '
                       'WHERE version_id = %s ORDER BY "index"', [version.pk])
        return cursor.fetchall()


def _import(project, engineer, write, name, rows):
    from webapp.datasets.services import dataset_import

    return dataset_import(project=project, user=engineer, name=name, path=write(f"{name}.jsonl", rows), split="0")


@pytest.mark.django_db(transaction=True)
def test_plain_strings_are_stored_once_and_read_back_as_imported(project, engineer, write):
    from webapp.review.training import training_rows

    version = _import(project, engineer, write, "plain", PLAIN)
    assert _json_columns(version) == [(True, True, True)] * len(PLAIN)
    rows = list(DatasetRow.objects.filter(version=version).order_by("index"))
    assert [(r.prompt, r.chosen, r.rejected) for r in rows] == [(d["prompt"], d["chosen"], d["rejected"])
                                                               for d in PLAIN]
    assert [r.prompt_text for r in rows] == [d["prompt"] for d in PLAIN]
    # a deferred text is loaded when the JSON column needs it
    only = DatasetRow.objects.filter(version=version).only("index", "prompt").order_by("index").first()
    assert only.prompt == PLAIN[0]["prompt"]
    selection = training_rows(version, include_unreviewed=True)
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in selection.rows] == [
        (d["prompt"], d["chosen"], d["rejected"]) for d in PLAIN]


@pytest.mark.django_db(transaction=True)
def test_message_lists_stay_json_and_a_derived_version_hashes_like_an_import(project, engineer, write):
    from webapp.datasets.cleaning import version_derive

    rows = [CONVERSATION, *PLAIN]
    version = _import(project, engineer, write, "mixed", rows)
    assert _json_columns(version) == [(False, False, False)] + [(True, True, True)] * len(PLAIN)
    stored = DatasetRow.objects.get(version=version, index=0)
    assert (stored.prompt, stored.chosen, stored.rejected) == (CONVERSATION["prompt"], CONVERSATION["chosen"],
                                                                CONVERSATION["rejected"])
    derived = version_derive(source=version, user=engineer, drop=[0], lineage={"operation": "test"}, summary="t")
    again = _import(project, engineer, write, "again", PLAIN)
    assert derived.content_hash == again.content_hash


@pytest.mark.django_db(transaction=True)
def test_the_migration_stores_old_rows_once_and_back(project, engineer, write):
    version = _import(project, engineer, write, "old", [CONVERSATION, *PLAIN])
    old = migrate_app_to(("datasets", "0007_rows_without_version_fk"))  # back: every JSON column filled in
    try:
        assert _json_columns(version) == [(False, False, False)] * (1 + len(PLAIN))
        OldRow = old.get_model("datasets", "DatasetRow")  # noqa: N806 - a model class
        assert [(r.prompt, r.chosen, r.rejected) for r in OldRow.objects.filter(version_id=version.pk)
                .order_by("index")][1:] == [(d["prompt"], d["chosen"], d["rejected"]) for d in PLAIN]
    finally:
        migrate_app_to(None)  # forward again: stored once
    assert _json_columns(version) == [(False, False, False)] + [(True, True, True)] * len(PLAIN)
    assert [r.prompt for r in DatasetRow.objects.filter(version=version).order_by("index")][1:] == [
        d["prompt"] for d in PLAIN]


@pytest.mark.django_db(transaction=True)
def test_readers_outside_the_datasets_app_get_plain_prompts(project, engineer, write):
    """An arena's prompts from a dataset, and a reward test-run's rows, from a version whose prompts are plain."""
    from webapp.monitoring.services.arena import prompts_from_version
    from webapp.rewards.scoring import _rows

    rows = [{"prompt": f"{i}+{i}=", "ground_truth": str(2 * i)} for i in range(4)]
    version = _import(project, engineer, write, "sums", rows)
    assert _json_columns(version) == [(True, True, True)] * len(rows)
    arena = prompts_from_version(project, version, "all", 10)
    assert [p["prompt"] for p in arena] == [r["prompt"] for r in rows]
    assert [r["prompt"] for r in _rows(version, "", 10)] == [r["prompt"] for r in rows]
