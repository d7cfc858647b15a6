"""Forms: the launch form (generated from the settings table) and its submission (bind, plan, launch), model
registration, resume."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django import forms
from django.http import QueryDict

from training import hparams as cfg
from training.guard_rules import ACTIONS, BUILTIN, KL_RULE, Rule, RuleConfigError, describe, parse_rules
from training.presets import DEFAULT_PRESET, PRESETS, preset_choices
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.models import DatasetVersion, VersionStatus
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.forms import RewardSpecForm
from webapp.runs.models import Backend, Job, JobKind
from webapp.runs.services.plan import AlreadyLaunched, JobPlan, launched_job, plan_or_create

INPUT_FIELDS = ("name", "kind", "backend", "preset", "dataset_version", "include_unreviewed", "base_model",
                "teacher_model")


def _setting_field(s: cfg.Setting) -> forms.Field:
    attrs = {"data-kinds": " ".join(s.kinds), "data-backends": " ".join(s.backends), "data-setting": s.key}
    common = {"required": False, "label": s.label, "help_text": s.help}
    if s.type == "bool":
        return forms.BooleanField(widget=forms.CheckboxInput(attrs=attrs), **common)
    if s.type == "choice":
        return forms.ChoiceField(choices=[(c, c) for c in s.choices], widget=forms.Select(attrs=attrs), **common)
    if s.type == "int":
        return forms.IntegerField(widget=forms.NumberInput(attrs={**attrs, "step": "1"}), **common)
    if s.type == "float":
        return forms.FloatField(widget=forms.TextInput(attrs={**attrs, "inputmode": "decimal"}), **common)
    return forms.CharField(widget=forms.TextInput(attrs=attrs), **common)


def _builtin_entries(config: dict) -> dict[str, dict]:
    return {e["rule"]: e for e in config.get("guard_rules") or []
            if isinstance(e, dict) and e.get("rule") in BUILTIN and not e.get("name")}


# The columns of a built-in rule's row on the form (its on/off box comes first): the Rule fields they set.
RULE_PARTS = ("threshold", "patience", "action", "lr_factor", "kl_coef_factor", "new_seed", "max_restores")
FACTORS = ("lr_factor", "kl_coef_factor")
RESTORE_CHANGES = (*FACTORS, "new_seed")  # what a restore changes: written together, as the row shows them


def _rule_or_default(name: str, entry: dict | None) -> Rule:
    try:
        return parse_rules([{**(entry or {}), "rule": name}])[0]
    except RuleConfigError:  # a stored entry that no longer holds: show the built-in's values
        return parse_rules([{"rule": name}])[0]


def rules_initial(config: dict) -> dict[str, Any]:
    """Form values of the built-in health rules (the KL guard is "kl"): on when the config lists them enabled,
    with the values they would run with."""
    out: dict[str, Any] = {}
    entries = _builtin_entries(config)
    for name in BUILTIN:
        entry = entries.get(name)
        rule = _rule_or_default(name, entry)
        out[f"rule_{name}"] = entry is not None and rule.enabled
        for part in RULE_PARTS:
            value = getattr(rule, part)
            out[f"rule_{name}_{part}"] = "" if value is None else value
    return out


def _rule_fields(name: str) -> dict[str, forms.Field]:
    decimal = forms.TextInput(attrs={"inputmode": "decimal"})
    return {
        f"rule_{name}": forms.BooleanField(required=False, label=name),
        f"rule_{name}_threshold": forms.FloatField(required=False, label=f"{name} threshold", widget=decimal),
        f"rule_{name}_patience": forms.IntegerField(required=False, min_value=1, max_value=10_000,
                                                    label=f"{name} patience (steps)"),
        f"rule_{name}_action": forms.ChoiceField(choices=[(a, a) for a in ACTIONS], required=False,
                                                 label=f"{name} action"),
        f"rule_{name}_lr_factor": forms.FloatField(required=False, label=f"{name}: on restore, lr ×", widget=decimal),
        f"rule_{name}_kl_coef_factor": forms.FloatField(required=False, label=f"{name}: on restore, KL coefficient ×",
                                                        widget=decimal),
        f"rule_{name}_new_seed": forms.BooleanField(required=False, label=f"{name}: on restore, new seed"),
        f"rule_{name}_max_restores": forms.IntegerField(required=False, min_value=0, max_value=100,
                                                        label=f"{name}: restores at most"),
    }


HUMAN_EVAL_FIELDS = ("he_every", "he_against", "he_items", "he_dataset_version", "he_split", "he_reward_rise")


def human_eval_initial(config: dict) -> dict[str, Any]:
    """Form values of the periodic human-evaluation schedule (config["human_eval"]); blank: off."""
    block = config.get("human_eval") or {}
    return {"he_every": block.get("every") or "", "he_against": block.get("against") or "previous",
            "he_items": block.get("items") or 20, "he_dataset_version": block.get("dataset_version") or "",
            "he_split": block.get("split") or "val", "he_reward_rise": block.get("reward_rise", 0.1)}


def settings_initial(config: dict) -> dict[str, Any]:
    """Form initial values for every setting (and the built-in health rules) from a resolved config."""
    out = {}
    for s in cfg.SETTINGS:
        value = cfg.value_of(config, s.key)
        out[s.form_name] = ("" if value is None else value)
    return {**out, **rules_initial(config), **human_eval_initial(config)}


class _VersionChoice(forms.ModelChoiceField):
    def label_from_instance(self, dv: DatasetVersion) -> str:
        return f"{dv.dataset.name} v{dv.number} · {dv.dataset.get_kind_display()} · {count(dv.row_count, 'row')}"


class _ModelChoice(forms.ModelChoiceField):
    def label_from_instance(self, m: ModelEntry) -> str:
        hub = " · hub id (GPU workers with hub access only)" if not m.path else ""
        return f"{m.name} · {m.get_kind_display()}{hub}"


class JobForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Blank: kind · model · preset.")
    kind = forms.ChoiceField(choices=JobKind.choices, initial=JobKind.GRPO)
    backend = forms.ChoiceField(choices=Backend.choices, initial=Backend.LOCAL)
    preset = forms.ChoiceField(choices=preset_choices(), initial=DEFAULT_PRESET,
                               help_text="Fills every setting below; your edits win.")
    dataset_version = _VersionChoice(queryset=DatasetVersion.objects.none(), label="Dataset version",
                                     help_text="GRPO: verifiable prompts; reward model: preference pairs; "
                                               "distillation: either.")
    include_unreviewed = forms.BooleanField(required=False, label="Include unreviewed pairs",
                                            help_text="Off: only pairs accepted in review are used.")
    base_model = _ModelChoice(queryset=ModelEntry.objects.none(), label="Base model")
    teacher_model = _ModelChoice(queryset=ModelEntry.objects.none(), required=False, label="Teacher model",
                                 help_text="Distillation only.")

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project
        self.fields["dataset_version"].queryset = DatasetVersion.objects.filter(
            dataset__project=project, status=VersionStatus.READY).select_related("dataset") \
            .order_by("dataset__name", "-number")
        models = ModelEntry.objects.filter(project=project)
        self.fields["base_model"].queryset = models
        self.fields["teacher_model"].queryset = models.filter(kind=ModelKind.CAUSAL_LM)
        for s in cfg.SETTINGS:
            self.fields[s.form_name] = _setting_field(s)
        for name in BUILTIN:
            self.fields.update(_rule_fields(name))
        self._human_eval_fields(project)

    def _human_eval_fields(self, project) -> None:
        self.fields["he_every"] = forms.IntegerField(
            required=False, min_value=0, label="Every N checkpoints",
            help_text="Blank or 0: off. A blind pairwise task opens for every N-th checkpoint.")
        self.fields["he_against"] = forms.ChoiceField(
            choices=[("previous", "the previous evaluated checkpoint"), ("base", "the base model")], required=False,
            label="Compare with")
        self.fields["he_items"] = forms.IntegerField(required=False, min_value=1, max_value=200,
                                                     label="Number of prompts")
        self.fields["he_dataset_version"] = _VersionChoice(
            queryset=DatasetVersion.objects.filter(dataset__project=project, status=VersionStatus.READY)
            .select_related("dataset").order_by("dataset__name", "-number"), required=False,
            label="Held-out prompts", empty_label="The run's validation split")
        self.fields["he_split"] = forms.ChoiceField(choices=[("val", "validation"), ("train", "train")],
                                                    required=False, label="Split of that version")
        self.fields["he_reward_rise"] = forms.FloatField(
            required=False, min_value=0, max_value=1000, label="Flag when the reward rose by more than",
            widget=forms.TextInput(attrs={"inputmode": "decimal"}))

    def clean(self) -> dict[str, Any]:
        """A required setting sent blank is an error on its field (not silently the preset's value)."""
        data = super().clean()
        kind, backend = data.get("kind"), data.get("backend")
        for s in cfg.SETTINGS:
            if s.type == "bool" or s.optional or s.form_name in self.errors or \
                    (kind and backend and not s.offered(kind, backend)):
                continue
            raw = self.data.get(self.add_prefix(s.form_name))
            if raw is not None and not str(raw).strip():
                self.add_error(s.form_name, f"{s.label}: a value is required.")
        for name in BUILTIN:  # a rule that is on must hold with each value typed in its row
            if data.get(f"rule_{name}"):
                self._check_rule_row(name, data)
        data["overrides"] = self.overrides()  # parsed once, with every field's verdict known
        return data

    def _check_rule_row(self, name: str, data: dict) -> None:
        for part in RULE_PARTS:
            value, field = data.get(f"rule_{name}_{part}"), f"rule_{name}_{part}"
            if value in (None, "") or field in self.errors:
                continue
            try:
                parse_rules([{"rule": name, part: value}])
            except RuleConfigError as exc:
                self.add_error(field, f"{exc}.")
        if not any(f"rule_{name}_{p}" in self.errors for p in RULE_PARTS):
            try:
                parse_rules([self._rule_entry(name, {})])
            except RuleConfigError as exc:
                self.add_error(f"rule_{name}_threshold", f"{exc}.")

    def human_eval(self) -> dict[str, Any]:
        """config["human_eval"] from the form; {} when the schedule is off."""
        data = self.cleaned_data
        if not data.get("he_every"):
            return {}
        version = data.get("he_dataset_version")
        block = {"every": data["he_every"], "against": data.get("he_against") or "previous",
                 "items": data.get("he_items") or 20, "split": data.get("he_split") or "val",
                 "reward_rise": data["he_reward_rise"] if data.get("he_reward_rise") is not None else 0.1}
        if version is not None:
            block["dataset_version"] = version.pk
        return block

    def human_eval_rows(self):
        return [self[n] for n in HUMAN_EVAL_FIELDS]

    def rule_rows(self) -> list[tuple[str, str, Any, list]]:
        """(name, what it watches by default, its on/off box, its other fields) per built-in rule."""
        return [(name, describe(parse_rules([{"rule": name}])[0]), self[f"rule_{name}"],
                 [self[f"rule_{name}_{part}"] for part in RULE_PARTS]) for name in BUILTIN]

    def _rule_entry(self, name: str, base: dict | None) -> dict[str, Any]:
        """A built-in rule's declaration: the preset's entry with the values typed in its row that differ from
        what that entry runs with (so an untouched row keeps the entry as it is)."""
        entry = {k: v for k, v in (base or {"rule": name}).items() if k != "enabled"}
        current = _rule_or_default(name, entry)
        typed = {part: self.cleaned_data.get(f"rule_{name}_{part}") for part in RULE_PARTS}
        changed = {part for part, value in typed.items()
                   if value not in (None, "") and value != getattr(current, part)}
        entry.update({part: typed[part] for part in changed})
        if changed & set(RESTORE_CHANGES):  # a restore's changes go together: all as the row shows them
            for part in FACTORS:
                if typed[part] in (None, ""):
                    entry.pop(part, None)
                else:
                    entry[part] = typed[part]
        return {**entry, "rule": name}

    def guard_rules(self) -> list[dict[str, Any]]:
        """The preset's health rules with the form's edits: built-ins turned on or off with the values in their
        row (the preset's KL guard turned off stays listed, off, so that the KL chart keeps its line); the
        preset's own custom rules are kept as they are."""
        data = self.cleaned_data
        base = cfg.base_config(data.get("kind") or cfg.KINDS[0], data.get("preset") or DEFAULT_PRESET)
        entries = _builtin_entries(base)
        custom = [e for e in base.get("guard_rules") or [] if all(e is not b for b in entries.values())]
        rules = []
        for name in BUILTIN:
            if data.get(f"rule_{name}"):
                rules.append(self._rule_entry(name, entries.get(name)))
            elif name == KL_RULE and name in entries:  # off, but its threshold stays the KL chart's line
                rules.append({**self._rule_entry(name, entries[name]), "enabled": False})
        return rules + custom

    def setting_groups(self) -> list[tuple[str, list]]:
        groups: dict[str, list] = {}
        for s in cfg.SETTINGS:
            groups.setdefault(s.group, []).append((s, self[s.form_name]))
        return list(groups.items())

    def input_fields(self):
        return [self[n] for n in INPUT_FIELDS]

    def overrides(self) -> dict[str, Any]:
        """The settings offered for the chosen kind and backend, as overrides (the others keep the preset's
        value): a blank optional setting means None, a blank required one the preset's value."""
        out = {}
        kind, backend = self.cleaned_data.get("kind"), self.cleaned_data.get("backend")
        for s in cfg.SETTINGS:
            if s.form_name in self.errors:
                continue  # already refused on its field; plan the rest with the preset's value
            if kind and backend and not s.offered(kind, backend):
                continue  # hidden on the form for this kind/backend
            raw = self.data.get(self.add_prefix(s.form_name)) if s.type != "bool" else None
            value = self.cleaned_data.get(s.form_name)
            if s.type == "bool":
                out[s.key] = bool(value)
            elif value in (None, "") or raw in (None, ""):
                if s.optional and raw is not None:
                    out[s.key] = None
            else:
                out[s.key] = value
        if self.data.get(self.add_prefix("guard_rules_form")):  # shown on the form: its rules replace the preset's
            out["guard_rules"] = self.guard_rules()
        if self.data.get(self.add_prefix("human_eval_form")) and not any(f in self.errors for f in HUMAN_EVAL_FIELDS):
            out["human_eval"] = self.human_eval() if kind in ("grpo", "distill") else {}
        return out

    def plan(self, reward_form, launch_as=None, launch_token: uuid.UUID | None = None
             ) -> tuple[JobPlan | None, Job | None]:
        """Parse this form and the reward table and plan the launch once; every error lands next to its field,
        all in one round: a missing dataset or model does not hide the settings' and the reward's errors (the
        plan reports the missing input itself). With `launch_as` (the user pressing Launch) and no error, the
        plan is saved as a job in the same call (`plan_or_create`). (None, None): the kind, backend or preset is
        unparseable, so nothing can be planned."""
        self.is_valid()
        reward_form.is_valid()
        if any(name in self.errors for name in ("kind", "backend", "preset")):
            return None, None
        data = self.cleaned_data
        plan, job = plan_or_create(
            project=self.project, kind=data["kind"], backend=data["backend"], preset=data["preset"],
            hp_overrides=data["overrides"], dataset_version=data.get("dataset_version"),
            reward_spec=reward_form.cleaned_data.get("reward_spec"), base_model=data.get("base_model"),
            teacher_model=data.get("teacher_model"), include_unreviewed=data.get("include_unreviewed", False),
            launch_as=None if self.errors or reward_form.errors else launch_as, name=data.get("name"),
            launch_token=launch_token)
        self.apply_errors(plan.errors, reward_form)
        return plan, job

    def apply_errors(self, errors: dict[str, str], reward_form=None) -> None:
        """Put each plan error next to its field (settings by key, inputs by name)."""
        for key, message in errors.items():
            name = cfg.BY_KEY[key].form_name if key in cfg.BY_KEY else ("he_every" if key == "human_eval" else key)
            if key.startswith("guard_rules."):  # a rule's action that cannot work (restore without checkpoints)
                name = f"rule_{key.split('.', 1)[1]}_action"
            if key == "reward_spec" and reward_form is not None:
                if not reward_form.errors:  # the table's own error says it first
                    reward_form.add_error(None, message)
            elif name in self.fields:
                if name not in self.errors:
                    self.add_error(name, message)
            else:
                self.add_error(None, message)


REWARD_PREFIX = "reward"


def bind_job_forms(project, *, data=None, initial=None, reward_initial=None) -> tuple[JobForm, RewardSpecForm]:
    """The New job form and its reward table. The table is handed its own `reward-…` fields only: the job's
    settings never pass through the rewards app."""
    reward_data = None if data is None else _prefixed(data, REWARD_PREFIX)
    form = JobForm(data, project=project, initial=initial)
    reward_form = RewardSpecForm(reward_data, project=project, prefix=REWARD_PREFIX, initial_spec=reward_initial)
    return form, reward_form


def _prefixed(data, prefix: str) -> QueryDict:
    """The fields of `data` named `<prefix>-…`, every value of each kept."""
    out = QueryDict(mutable=True)
    for key in data:
        if key.startswith(prefix + "-"):
            out.setlist(key, data.getlist(key))
    return out


@dataclass
class Submission:
    """What one POST of the New job form came to: the bound forms and the plan (None when the kind, backend or
    preset is unparseable); for a launch, the job it made, or the job this review made before (Back after
    Launch, a double click)."""

    form: JobForm | None
    reward_form: RewardSpecForm | None
    plan: JobPlan | None
    job: Job | None = None
    launched_before: Job | None = None

    @property
    def ok(self) -> bool:
        return self.plan is not None and not self.plan.errors and not self.form.errors


def submit_job_form(*, project, user, data, launch_now: bool = False,
                    launch_token: uuid.UUID | None = None) -> Submission:
    """Bind and plan a POST of the New job form, every error next to its field; with `launch_now` (the review's
    Launch button) and no error, save the job and enqueue it in the same call (`plan.plan_or_create`), once per
    launch token."""
    done = launched_job(project, launch_token)
    if done is not None:
        return Submission(None, None, None, launched_before=done)
    form, reward_form = bind_job_forms(project, data=data)
    try:
        plan, job = form.plan(reward_form, launch_as=user if launch_now else None, launch_token=launch_token)
    except AlreadyLaunched as exc:
        return Submission(form, reward_form, None, launched_before=exc.job)
    except ApplicationError as exc:
        form.apply_errors(getattr(exc, "errors", None) or {exc.field or "__all__": exc.message}, reward_form)
        return Submission(form, reward_form, None)
    return Submission(form, reward_form, plan, job=job)


class ModelRegisterForm(forms.Form):
    name = forms.CharField(max_length=200)
    path = forms.CharField(max_length=500, required=False, label="Local folder",
                           help_text="Absolute path of a Hugging Face model folder (config.json + safetensors) "
                                     "on the workers, inside an approved model folder (MODELS_ROOT or MODEL_ROOTS).")
    hub_id = forms.CharField(max_length=200, required=False, label="Or a hub id",
                             help_text="e.g. Qwen/Qwen2.5-0.5B-Instruct: only GPU workers with hub access can use it.")
    kind = forms.ChoiceField(choices=[("", "Detect from the folder")] + list(ModelKind.choices), required=False,
                             help_text="Needed for hub ids; detected for folders.")
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class CheckpointModelForm(forms.Form):
    step = forms.IntegerField(min_value=0, label="Checkpoint step")
    name = forms.CharField(max_length=200, required=False, help_text="Blank: job<id>-step<N>.")


class ResumeForm(forms.Form):
    checkpoint = forms.IntegerField(required=False, min_value=0, label="From step",
                                    help_text="Blank: the last checkpoint.")


def preset_table() -> dict[str, dict[str, dict[str, Any]]]:
    """{preset: {kind: {form_name: value}}} for the form's script (fills the fields on preset change)."""
    return {p: {k: {n: v for n, v in settings_initial(cfg.base_config(k, p)).items() if n not in HUMAN_EVAL_FIELDS}
                for k in cfg.KINDS} for p in PRESETS}


def preset_backends() -> dict[str, str]:
    return {name: p.get("backend", "local") for name, p in PRESETS.items()}
