# One blind pairwise-judging model (step 3 of 3): judge runs point at blind tasks; the arena and human-evaluation
# tables are gone (0011 copied them).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('monitoring', '0011_blind_tasks_data'),
    ]

    operations = [
        migrations.RemoveField(model_name='judgerun', name='arena'),
        migrations.RemoveField(model_name='judgerun', name='task'),
        migrations.RenameField(model_name='judgerun', old_name='blind_task', new_name='task'),
        migrations.AlterField(
            model_name='judgerun',
            name='task',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='judge_runs', to='monitoring.blindtask'),
        ),
        migrations.DeleteModel(name='ArenaJudgement'),
        migrations.DeleteModel(name='ArenaPair'),
        migrations.DeleteModel(name='Arena'),
        migrations.DeleteModel(name='HumanVerdict'),
        migrations.DeleteModel(name='HumanEvalItem'),
        migrations.DeleteModel(name='HumanEvalTask'),
    ]
