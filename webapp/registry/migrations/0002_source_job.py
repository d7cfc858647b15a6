# The job a registered model was exported from (added after runs let go of the model: the two point at each other).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('registry', '0001_initial'),
        ('runs', '0005_model_registry_moved'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AddField(
                model_name='modelentry',
                name='source_job',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='runs.job'),
            ),
        ]),
    ]
