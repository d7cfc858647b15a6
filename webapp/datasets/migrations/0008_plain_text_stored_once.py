"""A row's plain, non-empty prompt, chosen or rejected string is kept in its text column only: its JSON column
becomes NULL (see `DatasetRow.prompt`). Reversible: the JSON strings are rebuilt from the text columns."""
from django.db import migrations

FIELDS = ("prompt", "chosen", "rejected")


def _run(schema_editor, assignments: list[str], where: str) -> None:
    schema_editor.execute(f"UPDATE datasets_datasetrow SET {', '.join(assignments)} WHERE {where}")


def store_once(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        same = "jsonb_typeof({f}) = 'string' AND {f}_text <> '' AND {f} #>> '{{}}' = {f}_text"
    else:  # SQLite keeps JSON as text
        same = "json_type({f}) = 'text' AND {f}_text <> '' AND json_extract({f}, '$') = {f}_text"
    _run(schema_editor, [f"{f} = CASE WHEN {same.format(f=f)} THEN NULL ELSE {f} END" for f in FIELDS],
         " OR ".join(f"({same.format(f=f)})" for f in FIELDS))


def store_twice(apps, schema_editor):
    to_json = "to_jsonb({f}_text)" if schema_editor.connection.vendor == "postgresql" else "json_quote({f}_text)"
    missing = "{f} IS NULL AND {f}_text <> ''"
    _run(schema_editor, [f"{f} = CASE WHEN {missing.format(f=f)} THEN {to_json.format(f=f)} ELSE {f} END"
                         for f in FIELDS], " OR ".join(f"({missing.format(f=f)})" for f in FIELDS))


class Migration(migrations.Migration):

    dependencies = [
        ("datasets", "0007_rows_without_version_fk"),
    ]

    operations = [migrations.RunPython(store_once, store_twice, elidable=True)]
