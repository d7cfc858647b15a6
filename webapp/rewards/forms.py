"""Forms: reward functions, versions, test-runs, and the reusable reward-spec widget for job launches."""
from __future__ import annotations

from typing import Any

from django import forms

from training.reward_mix import SHAPING_LABELS, SHAPINGS
from webapp.core import jsonsafe
from webapp.core.text import count
from webapp.rewards import selectors
from webapp.rewards.samples import MAX_SAMPLES

SOURCE_WIDGET = forms.Textarea(attrs={"rows": 22, "spellcheck": "false", "data-code-editor": "python",
                                      "class": "code-source"})


class RewardFunctionForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Letters, digits, spaces, '.', '_' or '-'; "
                                                     "jobs write the source to reward/<name>.py.")
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    entry_point = forms.CharField(max_length=100, initial="compute_score", label="Function name",
                                  help_text="VERL's custom_reward_function.name (compute_score by default).")
    source = forms.CharField(widget=SOURCE_WIDGET, strip=False, label="Source")
    message = forms.CharField(max_length=300, required=False, label="Version message")


class RewardVersionForm(forms.Form):
    source = forms.CharField(widget=SOURCE_WIDGET, strip=False, label="Source")
    entry_point = forms.CharField(max_length=100, label="Function name")
    message = forms.CharField(max_length=300, required=False, label="Version message",
                              widget=forms.TextInput(attrs={"placeholder": "What changed and why"}))


class RewardTestRunForm(forms.Form):

    dataset_version = forms.TypedChoiceField(coerce=int, required=False, empty_value=None,
                                             label="Dataset version")
    split = forms.ChoiceField(choices=[("", "All rows"), ("train", "Train"), ("val", "Validation")],
                              required=False)
    limit = forms.IntegerField(min_value=1, max_value=MAX_SAMPLES, initial=20, required=False,
                               label="Samples (N)",
                               help_text="The first N rows by index (ignored when responses are pasted).")
    responses = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}), required=False,
                                strip=False, label="Or paste responses",
                                help_text="One response per line, or a JSON list of strings or of objects "
                                          "{\"response\", \"ground_truth\", \"data_source\", \"extra_info\"}. "
                                          "Response i is scored against row i of the dataset version, if one "
                                          "is chosen.")
    rollout_run = forms.TypedChoiceField(coerce=int, required=False, empty_value=None, label="Stored rollouts of run",
                                         help_text="Scores the first N rows of the run's samples/rollout dump "
                                                   "(its responses during training) instead of dataset rows.")
    rollout_step = forms.IntegerField(min_value=0, required=False, label="Rollouts of step",
                                      help_text="Blank: the latest step with rollouts.")
    sample_model = forms.TypedChoiceField(coerce=int, required=False, empty_value=None,
                                          label="Or responses sampled from model",
                                          help_text="The model answers the first N prompts of the chosen prompt set "
                                                    "(greedy) on a worker; its answers are scored.")
    # The editor's current text (may be unsaved); empty: the saved version `version` (default: latest).
    source = forms.CharField(widget=forms.HiddenInput, required=False, strip=False)
    entry_point = forms.CharField(widget=forms.HiddenInput, required=False)
    version = forms.IntegerField(widget=forms.HiddenInput, required=False, min_value=1)

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset_version"].choices = [("", "— none (pasted responses only) —")] + [
            (dv.pk, f"{dv.dataset.name} v{dv.number} · {dv.dataset.get_kind_display()} · {count(dv.row_count, 'row')}")
            for dv in selectors.testable_dataset_versions(project=project)]
        from webapp.rewards import rollouts

        runs = rollouts.rollout_runs(project=project)
        self.fields["rollout_run"].choices = [("", "— none —" if runs else "— no run has stored rollouts yet —")] + [
            (r["id"], r["label"]) for r in runs]
        models = list(rollouts.sample_models(project=project))
        self.fields["sample_model"].choices = [("", "— none —" if models else "— no registered model —")] + [
            (m.pk, m.name) for m in models]


# ---- the reward spec widget -------------------------------------------------------------------------

MAX_WEIGHT = 1000  # weights are relative: a larger one is a typo


def _weight_field(label: str) -> forms.FloatField:
    return forms.FloatField(required=False, label=label, widget=forms.NumberInput(
        attrs={"step": "any", "min": "0", "placeholder": "not used", "class": "weight"}))


class RewardSpecForm(forms.Form):
    """Pick function versions and reward models with weights, and a shaping; `cleaned_data["reward_spec"]`
    (parsed, not validated: the launch plan validates it).

    Usage in a launch form: `RewardSpecForm(request.POST or None, project=project, prefix="reward")`,
    rendered with `{% include "rewards/_reward_spec_fields.html" with form=reward_form %}`.
    A component is used when its weight is above 0; a blank weight leaves it out.
    """

    shaping = forms.ChoiceField(choices=[(s, SHAPING_LABELS[s]) for s in SHAPINGS], initial="raw",
                                label="Reward shaping")

    def __init__(self, *args, project, initial_spec: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project
        self._functions: list[tuple[Any, str, str]] = []
        self._models: list[tuple[Any, str]] = []
        for fn in selectors.reward_function_list(project=project).prefetch_related("versions"):
            versions = sorted(fn.versions.all(), key=lambda v: -v.number)
            if not versions:
                continue
            vname, wname = f"fn_{fn.pk}_version", f"fn_{fn.pk}_weight"
            self.fields[vname] = forms.TypedChoiceField(
                coerce=int, label=f"{fn.name} version", initial=versions[0].pk,
                choices=[(v.pk, f"v{v.number} · {v.sha256[:8]}{' · ' + v.message if v.message else ''}"[:90])
                         for v in versions])
            self.fields[wname] = _weight_field(f"{fn.name} weight")
            self._functions.append((fn, vname, wname))
        for model in selectors.reward_models(project=project):
            wname = f"rm_{model.pk}_weight"
            self.fields[wname] = _weight_field(f"{model.name} weight")
            self._models.append((model, wname))
        if initial_spec:
            self._apply_initial(initial_spec)
        elif len(self._functions) == 1 and not self._models:
            # One reward function and nothing else: it is the obvious choice, so start it at weight 1.
            self.initial[self._functions[0][2]] = 1.0

    def _apply_initial(self, spec: dict) -> None:
        self.initial["shaping"] = spec.get("shaping", "raw")
        by_version = {}
        for fn, vname, _ in self._functions:
            for pk, _label in self.fields[vname].choices:
                by_version[pk] = fn.pk
        for comp in spec.get("components") or []:
            if comp.get("type") == "function" and comp.get("version_id") in by_version:
                fn_pk = by_version[comp["version_id"]]
                self.initial[f"fn_{fn_pk}_version"] = comp["version_id"]
                self.initial[f"fn_{fn_pk}_weight"] = comp.get("weight", 1.0)
            elif comp.get("type") == "model":
                self.initial[f"rm_{comp.get('model_id')}_weight"] = comp.get("weight", 1.0)

    @property
    def is_empty(self) -> bool:
        return not self._functions and not self._models

    def function_rows(self):
        from webapp.rewards.probes import probe_status

        for fn, vname, wname in self._functions:
            latest = fn.latest_version
            yield {"function": fn, "version": self[vname], "weight": self[wname],
                   "latest": latest, "probes": probe_status(latest) if latest else None}

    def model_rows(self):
        for model, wname in self._models:
            yield {"model": model, "weight": self[wname]}

    def clean(self):
        cleaned = super().clean()
        for name, value in list(cleaned.items()):
            if name.endswith("_weight") and value is not None and value < 0:
                self.add_error(name, "A weight must be above 0; leave it blank to leave this reward out.")
            elif name.endswith("_weight") and value is not None and value > MAX_WEIGHT:
                self.add_error(name, f"A weight must be at most {MAX_WEIGHT}, got {value:g}.")
        if not self.errors:
            # Parsed only: whether this job needs a reward, and whether the spec holds, is the launch
            # plan's decision (webapp.runs.services.plan.plan_job, reward_spec_validate).
            cleaned["reward_spec"] = build_reward_spec(cleaned)
        return cleaned


def build_reward_spec(cleaned: dict) -> dict:
    """Turn RewardSpecForm's cleaned data (fn_<id>_version/_weight, rm_<id>_weight, shaping) into a reward spec.

    Components with a blank or zero weight are left out; validation happens in reward_spec_validate.
    """
    components: list[dict] = []
    for name in sorted(cleaned, key=_field_order):
        weight = cleaned[name]
        if not name.endswith("_weight") or weight is None or weight == 0:
            continue
        kind, pk, _ = name.split("_", 2)
        if kind == "fn":
            components.append({"type": "function", "version_id": cleaned.get(f"fn_{pk}_version"),
                               "weight": float(weight)})
        elif kind == "rm":
            components.append({"type": "model", "model_id": int(pk), "weight": float(weight)})
    return {"shaping": cleaned.get("shaping") or "raw", "components": components}


def _field_order(name: str) -> tuple[int, int]:
    parts = name.split("_")
    kind = {"fn": 0, "rm": 1}.get(parts[0], 2)
    return kind, int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0


class ProbeForm(forms.Form):
    """An author's probe: one input of compute_score and the range its score must fall in."""

    name = forms.CharField(max_length=100, label="Probe name")
    solution_str = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), strip=False, required=False,
                                   label="Response (solution_str)")
    ground_truth = forms.CharField(required=False, strip=False, label="Ground truth")
    data_source = forms.CharField(max_length=200, required=False, label="data_source")
    extra_info = jsonsafe.FormJSONField(required=False, label="extra_info (JSON object)",
                                 widget=forms.TextInput(attrs={"placeholder": "{}"}))
    prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False,
                             label="Prompt (optional; the built-in echo probe repeats the first probe's)")
    lo = forms.FloatField(required=False, label="Lowest expected score (lo)")
    hi = forms.FloatField(required=False, label="Highest expected score (hi)")


class ProbeOverrideForm(forms.Form):
    version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=2000,
                             label="Why may this version launch despite its failing probes?")


class ProbeScaleForm(forms.Form):
    scale = forms.ChoiceField(label="Score scale", choices=[])
    threshold = forms.FloatField(required=False, label="Threshold (another scale)")

    def __init__(self, *args, **kwargs):
        from training.reward_probes import SCALE_LABELS, SCALES

        super().__init__(*args, **kwargs)
        self.fields["scale"].choices = [(s, SCALE_LABELS[s]) for s in SCALES]
