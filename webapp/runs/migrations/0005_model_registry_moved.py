# ModelEntry now belongs to the registry app (same table): jobs point at it there.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0004_zero_signal_run'),
        ('registry', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name='job',
                name='base_model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='registry.modelentry'),
            ),
            migrations.AlterField(
                model_name='job',
                name='teacher_model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='teacher_jobs', to='registry.modelentry'),
            ),
            migrations.AlterField(
                model_name='zerosignalrun',
                name='model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='registry.modelentry'),
            ),
            migrations.DeleteModel(name='ModelEntry'),
        ]),
    ]
