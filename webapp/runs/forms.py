"""Forms: the launch form (generated from the settings table), model registration, resume."""
from __future__ import annotations

from typing import Any

from django import forms

from training import jobconfig as cfg
from training.presets import DEFAULT_PRESET, PRESETS, preset_choices
from webapp.datasets.models import DatasetVersion, VersionStatus
from webapp.runs.models import Backend, JobKind, ModelEntry, ModelKind

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


def settings_initial(config: dict) -> dict[str, Any]:
    """Form initial values for every setting from a resolved config."""
    out = {}
    for s in cfg.SETTINGS:
        value = cfg.get_value(config, s.key)
        out[s.form_name] = ("" if value is None else value)
    return out


class _VersionChoice(forms.ModelChoiceField):
    def label_from_instance(self, dv: DatasetVersion) -> str:
        return f"{dv.dataset.name} v{dv.number} · {dv.dataset.get_kind_display()} · {dv.row_count} rows"


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
        return out

    def apply_errors(self, errors: dict[str, str], reward_form=None) -> None:
        """Put each plan error next to its field (settings by key, inputs by name)."""
        for key, message in errors.items():
            name = cfg.BY_KEY[key].form_name if key in cfg.BY_KEY else key
            if key == "reward_spec" and reward_form is not None:
                reward_form.add_error(None, message)
            elif name in self.fields:
                if name not in self.errors:
                    self.add_error(name, message)
            else:
                self.add_error(None, message)


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
    return {p: {k: settings_initial(cfg.base_config(k, p)) for k in cfg.KINDS} for p in PRESETS}


def preset_backends() -> dict[str, str]:
    return {name: p.get("backend", "local") for name, p in PRESETS.items()}
