# Faster imports: rows need no index on their hash (duplicate examples are found by index), and on
# PostgreSQL a row is stored whole up to a full page instead of being compressed from 2 kB on (a bigger table,
# less work per row written).

from django.db import migrations

ROW_TABLE = "datasets_datasetrow"


def store_rows_whole(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {ROW_TABLE} SET (toast_tuple_target = 8160)")


def store_rows_compressed(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {ROW_TABLE} RESET (toast_tuple_target)")


class Migration(migrations.Migration):

    dependencies = [
        ('datasets', '0005_quality_report'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='datasetrow',
            name='datasets_da_version_f61507_idx',
        ),
        migrations.RunPython(store_rows_whole, store_rows_compressed),
    ]
