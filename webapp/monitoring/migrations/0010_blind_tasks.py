# One blind pairwise-judging model for the arena and human evaluation (step 1 of 3: the new tables).
# 0011 copies the arenas and human evaluations into them; 0012 removes the old tables.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0003_invitations'),
        ('datasets', '0006_faster_row_writes'),
        ('monitoring', '0009_diagnostic_bundle'),
        ('registry', '0002_source_job'),
        ('runs', '0005_model_registry_moved'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='BlindTask',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed')], default='queued', max_length=16)),
                ('error', models.TextField(blank=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('source', models.CharField(choices=[('arena', 'Arena'), ('periodic', 'Periodic human evaluation'), ('checkpoint', 'Human evaluation against the references')], max_length=16)),
                ('title', models.CharField(max_length=200)),
                ('sides', models.JSONField(default=dict)),
                ('origin', models.CharField(blank=True, max_length=300)),
                ('prompts', models.JSONField(default=list)),
                ('sampling', models.JSONField(default=dict)),
                ('seed', models.BigIntegerField(default=0)),
                ('engine', models.CharField(blank=True, max_length=16)),
                ('progress', models.FloatField(default=0.0)),
                ('is_open', models.BooleanField(default=True)),
                ('closed_at', models.DateTimeField(blank=True, null=True)),
                ('anyone_may_judge', models.BooleanField(default=False)),
                ('gap', models.JSONField(blank=True, default=dict)),
                ('flagged_at', models.DateTimeField(blank=True, null=True)),
                ('a_checkpoint', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='runs.checkpoint')),
                ('a_model', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='registry.modelentry')),
                ('assignees', models.ManyToManyField(blank=True, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('b_checkpoint', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='blind_tasks', to='runs.checkpoint')),
                ('b_model', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='registry.modelentry')),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('dataset_version', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='datasets.datasetversion')),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='blind_tasks', to='core.project')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
                'abstract': False,
            },
        ),
        migrations.CreateModel(
            name='BlindPair',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('index', models.PositiveIntegerField()),
                ('prompt', models.JSONField(blank=True, null=True)),
                ('prompt_text', models.TextField()),
                ('response_a', models.TextField()),
                ('response_b', models.TextField()),
                ('truncated_a', models.BooleanField(default=False)),
                ('truncated_b', models.BooleanField(default=False)),
                ('seed', models.BigIntegerField(blank=True, null=True)),
                ('ground_truth', models.JSONField(blank=True, null=True)),
                ('data_source', models.CharField(blank=True, max_length=200)),
                ('extra_info', models.JSONField(blank=True, default=dict)),
                ('score_a', models.FloatField(blank=True, null=True)),
                ('score_b', models.FloatField(blank=True, null=True)),
                ('auto_outcome', models.FloatField(blank=True, null=True)),
                ('identical', models.BooleanField(default=False)),
                ('order_key', models.CharField(max_length=64)),
                ('task', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='pairs', to='monitoring.blindtask')),
            ],
            options={
                'ordering': ['task', 'index'],
            },
        ),
        migrations.CreateModel(
            name='BlindVerdict',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('choice', models.CharField(choices=[('a', 'A is better'), ('b', 'B is better'), ('tie', 'Tie'), ('both_bad', 'Both bad')], max_length=8)),
                ('shown_left', models.CharField(choices=[('a', 'A'), ('b', 'B')], max_length=1)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('pair', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='verdicts', to='monitoring.blindpair')),
                ('reviewer', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['pair', 'created_at'],
            },
        ),
        migrations.AddConstraint(
            model_name='blindtask',
            constraint=models.UniqueConstraint(condition=models.Q(('source', 'periodic')), fields=('b_checkpoint',), name='unique_periodic_blind_task'),
        ),
        migrations.AddConstraint(
            model_name='blindpair',
            constraint=models.UniqueConstraint(fields=('task', 'index'), name='unique_blind_pair'),
        ),
        migrations.AddConstraint(
            model_name='blindverdict',
            constraint=models.UniqueConstraint(fields=('pair', 'reviewer'), name='unique_blind_verdict'),
        ),
        migrations.AddField(
            model_name='judgerun',
            name='blind_task',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='judge_runs', to='monitoring.blindtask'),
        ),
    ]
