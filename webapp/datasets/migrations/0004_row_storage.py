"""PostgreSQL only: keep dataset rows (a few KB each) inline and uncompressed.

Rows hold the text twice (structured JSON and flattened text), so most exceed the 2 KB TOAST
threshold and PostgreSQL would compress each one on insert; that halved COPY throughput in the
ingest benchmark. Rows up to 8 KB now stay inline; larger ones are still TOASTed.
"""
from django.db import migrations


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE datasets_datasetrow SET (toast_tuple_target = 8160)")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE datasets_datasetrow RESET (toast_tuple_target)")


class Migration(migrations.Migration):
    dependencies = [("datasets", "0003_row_version_index")]
    operations = [migrations.RunPython(forwards, backwards)]
