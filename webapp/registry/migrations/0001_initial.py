# The model registry moved out of the runs app; its table (runs_modelentry) stays where it is.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('core', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='ModelEntry',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('name', models.CharField(max_length=200)),
                    ('kind', models.CharField(choices=[('causal_lm', 'Causal LM (policy / teacher)'), ('reward_model', 'Sequence-classification reward model')], default='causal_lm', max_length=16)),
                    ('path', models.CharField(blank=True, max_length=500)),
                    ('hub_id', models.CharField(blank=True, max_length=200)),
                    ('description', models.TextField(blank=True)),
                    ('num_parameters', models.BigIntegerField(blank=True, null=True)),
                    ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='models', to='core.project')),
                ],
                options={
                    'ordering': ['name'],
                    'db_table': 'runs_modelentry',
                    'constraints': [models.UniqueConstraint(fields=('project', 'name'), name='unique_model_name')],
                },
            ),
        ]),
    ]
