"""Monitoring state: the KL guard per job, on-demand checkpoint evaluations, human evaluations."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.models import Project, TimeStampedModel


class KLGuardRecord(models.Model):
    """The persisted state of a job's KL guard (training.kl_guard.GuardState as JSON)."""

    job = models.OneToOneField("runs.Job", on_delete=models.CASCADE, related_name="kl_guard_record")
    state = models.JSONField(default=dict)
    trips = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"KL guard of job {self.job_id}"


class GuardRulesRecord(models.Model):
    """The persisted run health of a job: its rules' state (training.guard_rules.EngineState as JSON) and
    whether it is stalled (training.stall)."""

    job = models.OneToOneField("runs.Job", on_delete=models.CASCADE, related_name="guard_rules_record")
    state = models.JSONField(default=dict)
    trips = models.PositiveIntegerField(default=0)
    stalled_since = models.DateTimeField(null=True, blank=True)
    stall = models.JSONField(default=dict, blank=True)  # the last stall check: idle_s, limit_s, step_s
    stall_resumes = models.PositiveIntegerField(default=0)
    notified_state = models.CharField(max_length=16, blank=True)  # the final state already notified
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"guard rules of job {self.job_id}"


class MetricRollup(models.Model):
    """Per (job, metric, level, bucket of 4**level steps): the points holding the min and the max (see rollup.py)."""

    job = models.ForeignKey("runs.Job", on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=128)
    level = models.PositiveSmallIntegerField()
    bucket = models.BigIntegerField()
    min_step = models.IntegerField()
    min_value = models.FloatField()
    min_time = models.FloatField(null=True)
    max_step = models.IntegerField()
    max_value = models.FloatField()
    max_time = models.FloatField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "name", "level", "bucket"], name="unique_rollup_bucket")]

    def __str__(self) -> str:
        return f"{self.name} L{self.level} #{self.bucket}"


class MetricRollupState(models.Model):
    """How far a series has been rolled up (reads roll up anything logged after it)."""

    job = models.ForeignKey("runs.Job", on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=128)
    through_step = models.IntegerField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "name"], name="unique_rollup_state")]

    def __str__(self) -> str:
        return f"{self.name} rolled up to step {self.through_step}"


class EvaluationStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class CheckpointWork(TimeStampedModel):
    """Work on a checkpoint that a worker does after the request: queued, running, then done or failed."""

    status = models.CharField(max_length=16, choices=EvaluationStatus.choices, default=EvaluationStatus.QUEUED)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]

    @property
    def is_active(self) -> bool:
        return self.status in (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING)


class CheckpointEvaluation(CheckpointWork):
    """One on-demand validation win-rate evaluation of a checkpoint (`python -m training.evaluate`)."""

    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.CASCADE, related_name="evaluations")
    win_rate = models.FloatField(null=True, blank=True)
    win_rate_lo = models.FloatField(null=True, blank=True)
    win_rate_hi = models.FloatField(null=True, blank=True)
    n = models.PositiveIntegerField(default=0)
    samples_path = models.CharField(max_length=500, blank=True)
    result = models.JSONField(default=dict, blank=True)  # the evaluator's whole output (per-source metrics)

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        return f"evaluation {self.pk} of checkpoint {self.checkpoint_id} ({self.status})"


class CheckpointExport(CheckpointWork):
    """A checkpoint zipped as a Hugging Face folder, built on a worker (a real model takes minutes)."""

    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.CASCADE, related_name="exports")
    variant = models.CharField(max_length=16)  # "full", or for LoRA "merged" / "adapter"
    path = models.CharField(max_length=500, blank=True)  # the zip, once it is built
    size_bytes = models.BigIntegerField(default=0)

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        return f"export {self.pk} of checkpoint {self.checkpoint_id} ({self.variant}, {self.status})"


class HumanEvalTask(TimeStampedModel):
    """A blind pairwise task: a checkpoint's validation responses against their references."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="human_eval_tasks")
    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.CASCADE, related_name="human_evals")
    title = models.CharField(max_length=200)
    source = models.CharField(max_length=300)  # which samples file the items came from
    sample_step = models.IntegerField(null=True, blank=True)
    is_open = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    # what the policy's responses are compared with: the dataset's reference, a previous checkpoint, the base
    opponent = models.CharField(max_length=200, default="reference")
    opponent_step = models.IntegerField(null=True, blank=True)  # the earlier checkpoint's step (0: the base model)
    scheduled = models.BooleanField(default=False)  # opened by the job's periodic human-evaluation schedule
    status = models.CharField(max_length=16, default="ready")  # scheduled ones: generating → ready | failed
    error = models.TextField(blank=True)
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")
    gap = models.JSONField(default=dict, blank=True)  # the reward-vs-human gap check (services/periodic.py)
    flagged_at = models.DateTimeField(null=True, blank=True)  # when the gap was first flagged (notified once)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["checkpoint"], condition=models.Q(scheduled=True),
                                               name="unique_scheduled_human_eval")]

    def __str__(self) -> str:
        return self.title


class Side(models.TextChoices):
    A = "a", "Left"
    B = "b", "Right"


class HumanEvalItem(models.Model):
    """One prompt with the policy's and the reference's responses; `policy_side` says where the policy is shown."""

    task = models.ForeignKey(HumanEvalTask, on_delete=models.CASCADE, related_name="items")
    index = models.PositiveIntegerField()
    prompt = models.TextField()
    policy_response = models.TextField()
    reference_response = models.TextField()
    policy_score = models.FloatField(null=True, blank=True)
    reference_score = models.FloatField(null=True, blank=True)
    auto_outcome = models.FloatField(null=True, blank=True)  # the reward's verdict for the policy: 1 / 0.5 / 0
    policy_side = models.CharField(max_length=1, choices=Side.choices)
    data_source = models.CharField(max_length=200, blank=True)
    ground_truth = models.JSONField(null=True, blank=True)  # for a reward function judging the pair

    class Meta:
        ordering = ["task", "index"]
        constraints = [models.UniqueConstraint(fields=["task", "index"], name="unique_human_eval_item")]

    def __str__(self) -> str:
        return f"task {self.task_id} item {self.index}"

    def response(self, side: str) -> str:
        return self.policy_response if side == self.policy_side else self.reference_response


class Choice(models.TextChoices):
    A = "a", "Left is better"
    B = "b", "Right is better"
    TIE = "tie", "Tie"


class HumanVerdict(models.Model):
    """One reviewer's judgement of one item; `outcome` is from the policy's side (1 win, 0.5 tie, 0 loss)."""

    item = models.ForeignKey(HumanEvalItem, on_delete=models.CASCADE, related_name="verdicts")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    choice = models.CharField(max_length=3, choices=Choice.choices)
    outcome = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["item", "created_at"]
        constraints = [models.UniqueConstraint(fields=["item", "reviewer"], name="unique_human_verdict")]

    def __str__(self) -> str:
        return f"{self.reviewer_id} on item {self.item_id}: {self.choice}"


class JudgeKind(models.TextChoices):
    REWARD_MODEL = "reward_model", "Reward model"
    REWARD = "reward", "The run's reward"
    JUDGE_MODEL = "judge_model", "Judge model (answers A or B)"


class JudgeRun(CheckpointWork):
    """An automatic judge over a human evaluation's or an arena's pairs, each judged twice with positions swapped
    (`python -m training.judges`); W/T/L, bootstrap interval and position-bias share."""

    task = models.ForeignKey(HumanEvalTask, null=True, blank=True, on_delete=models.CASCADE, related_name="judge_runs")
    # or an arena's pairs: judged from side B's view (B's wins / ties / losses), as its results table reads
    arena = models.ForeignKey("monitoring.Arena", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="judge_runs")
    kind = models.CharField(max_length=16, choices=JudgeKind.choices)
    label = models.CharField(max_length=300)  # the judge's name as shown (model name, "reward of run #7")
    model_path = models.CharField(max_length=500, blank=True)  # reward / judge models: the folder judged with
    wins = models.PositiveIntegerField(default=0)
    ties = models.PositiveIntegerField(default=0)
    losses = models.PositiveIntegerField(default=0)
    n = models.PositiveIntegerField(default=0)
    win_rate = models.FloatField(null=True, blank=True)
    win_rate_lo = models.FloatField(null=True, blank=True)
    win_rate_hi = models.FloatField(null=True, blank=True)
    inconsistent = models.PositiveIntegerField(default=0)
    unjudged = models.PositiveIntegerField(default=0)
    result = models.JSONField(default=dict, blank=True)  # the summary (per-pair verdicts stay in the run dir)

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        what = f"human evaluation {self.task_id}" if self.task_id else f"arena {self.arena_id}"
        return f"judge run {self.pk} on {what} ({self.status})"

    @property
    def position_bias_share(self) -> float | None:
        return self.inconsistent / self.n if self.n else None


class Arena(CheckpointWork):
    """Two models (a checkpoint or a registered model each) answer the same prompts with the same sampling
    settings and seeds; reviewers then judge the pairs blind. `sides` snapshots what each side was."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="arenas")
    title = models.CharField(max_length=200)
    a_checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    a_model = models.ForeignKey("registry.ModelEntry", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    b_checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    b_model = models.ForeignKey("registry.ModelEntry", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    sides = models.JSONField(default=dict)  # {"a": {label, path, base_model, checkpoint, job, step, model}}
    dataset_version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")
    prompts = models.JSONField(default=list)  # the prompts asked (strings or message lists), in order
    sampling = models.JSONField(default=dict)  # max_new_tokens, temperature, top_p (the same for both sides)
    seed = models.BigIntegerField(default=0)  # prompt i is sampled with seed + i on both sides
    engine = models.CharField(max_length=16, blank=True)  # which generation engine answered (vllm / transformers)
    progress = models.FloatField(default=0.0)
    is_open = models.BooleanField(default=True)

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        return self.title

    def label(self, side: str) -> str:
        return str((self.sides.get(side) or {}).get("label") or side.upper())


class ArenaPair(models.Model):
    """One prompt with both sides' responses, generated with `seed` on each side."""

    arena = models.ForeignKey(Arena, on_delete=models.CASCADE, related_name="pairs")
    index = models.PositiveIntegerField()
    prompt = models.JSONField()  # a string or a message list, as asked
    prompt_text = models.TextField()
    response_a = models.TextField()
    response_b = models.TextField()
    truncated_a = models.BooleanField(default=False)
    truncated_b = models.BooleanField(default=False)
    seed = models.BigIntegerField()

    class Meta:
        ordering = ["arena", "index"]
        constraints = [models.UniqueConstraint(fields=["arena", "index"], name="unique_arena_pair")]

    def __str__(self) -> str:
        return f"arena {self.arena_id} pair {self.index}"

    def response(self, side: str) -> str:
        return self.response_a if side == "a" else self.response_b


class ArenaChoice(models.TextChoices):
    A = "a", "A is better"
    B = "b", "B is better"
    TIE = "tie", "Tie"
    BOTH_BAD = "both_bad", "Both bad"


class ArenaJudgement(models.Model):
    """One reviewer's blind verdict on a pair, by side (a/b); `shown_left` is the side shown on the left."""

    pair = models.ForeignKey(ArenaPair, on_delete=models.CASCADE, related_name="judgements")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    choice = models.CharField(max_length=8, choices=ArenaChoice.choices)
    shown_left = models.CharField(max_length=1, choices=Side.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pair", "created_at"]
        constraints = [models.UniqueConstraint(fields=["pair", "reviewer"], name="unique_arena_judgement")]

    def __str__(self) -> str:
        return f"{self.reviewer_id} on pair {self.pair_id}: {self.choice}"


class DiagnosticBundle(CheckpointWork):
    """A run's diagnostic zip (spec, configs, versions, logs, metrics, guard history, samples, reward code, data
    fingerprints, stack dumps; secrets scrubbed), built on a worker: a long run's logs and samples are large."""

    job = models.ForeignKey("runs.Job", on_delete=models.CASCADE, related_name="diagnostic_bundles")
    sample_steps = models.PositiveIntegerField(default=5)  # the last N steps' rollout samples go in
    path = models.CharField(max_length=500, blank=True)  # the zip, once built
    size_bytes = models.BigIntegerField(default=0)
    files = models.JSONField(default=list, blank=True)  # [{"name", "bytes"}] what went in
    left_out = models.JSONField(default=list, blank=True)  # [{"name", "why"}] what the bounds kept out

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        return f"diagnostic bundle {self.pk} of job {self.job_id} ({self.status})"
