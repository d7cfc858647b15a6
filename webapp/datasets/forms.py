"""Forms: upload, column mapping, row filters, stats and export options."""
from __future__ import annotations

from django import forms

from webapp.datasets.exporters import FORMATS, TRL_STYLES
from webapp.datasets.selectors import LENGTH_FIELDS, REVIEW_STATES, RowFilters
from webapp.datasets.shapes import FIELDS, parse_column_map

KIND_CHOICES = [("", "Detect from the file"), ("preference", "Preference pairs"),
                ("prompts", "Verifiable prompts")]


class ImportOptionsForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="A new name creates a dataset; an existing one adds a version.")
    kind = forms.ChoiceField(choices=KIND_CHOICES, required=False)
    column_map = forms.CharField(required=False, label="Column mapping",
                                 help_text="Only when names differ, e.g. prompt=question,ground_truth=answer")
    skip_bad_rows = forms.BooleanField(required=False, label="Skip bad rows (import the valid rows, keep the report)")
    split = forms.CharField(max_length=32, initial="10%", label="Validation split",
                            help_text="A share (10%) or a row count (200), chosen at random with the seed below.")
    split_seed = forms.IntegerField(initial=0, label="Split seed")

    def clean_column_map(self) -> dict[str, str]:
        value = self.cleaned_data.get("column_map") or ""
        if isinstance(value, dict):
            return value
        try:
            return parse_column_map(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class UploadForm(ImportOptionsForm):
    file = forms.FileField(help_text="JSON Lines, JSON array, CSV or Parquet.")
    field_order = ["file", "name", "kind", "column_map", "skip_bad_rows", "split", "split_seed"]


class MappingForm(forms.Form):
    """One select per field, offering the file's columns (pre-filled with the suggestion)."""

    kind = forms.ChoiceField(choices=KIND_CHOICES, required=False)

    def __init__(self, *args, columns: list[str], suggested: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        choices = [("", "—")] + [(c, c) for c in columns]
        if "reward_model" in columns:
            choices.append(("reward_model.ground_truth", "reward_model.ground_truth"))
        for name in FIELDS:
            self.fields[f"map_{name}"] = forms.ChoiceField(choices=choices, required=False, label=name,
                                                           initial=(suggested or {}).get(name, ""))

    def column_map(self) -> dict[str, str]:
        return {name: self.cleaned_data[f"map_{name}"] for name in FIELDS if self.cleaned_data.get(f"map_{name}")}


class RowFilterForm(forms.Form):
    q = forms.CharField(required=False, label="Search", max_length=200)
    data_source = forms.CharField(required=False, label="Data source")
    split = forms.ChoiceField(choices=[("", "any"), ("train", "train"), ("val", "validation")], required=False)
    review_state = forms.ChoiceField(choices=[("", "any")] + [(s, s) for s in REVIEW_STATES], required=False,
                                     label="Review state")
    length_field = forms.ChoiceField(choices=[(k, k) for k in LENGTH_FIELDS], required=False, label="Length of")
    min_chars = forms.IntegerField(required=False, min_value=0, label="Min chars")
    max_chars = forms.IntegerField(required=False, min_value=0, label="Max chars")

    def filters(self) -> RowFilters:
        if not self.is_valid():
            return RowFilters()
        d = self.cleaned_data
        source = self.data.get("data_source")
        return RowFilters(q=d["q"].strip(), data_source=source if source not in (None, "") else None,
                          split=d["split"], review_state=d["review_state"],
                          length_field=d["length_field"] or "prompt", min_chars=d["min_chars"],
                          max_chars=d["max_chars"])


class ExportForm(forms.Form):
    format = forms.ChoiceField(choices=list(FORMATS.items()))
    trl_style = forms.ChoiceField(choices=[(s, s) for s in TRL_STYLES], required=False)
    approved_only = forms.BooleanField(required=False)
