from __future__ import annotations

from django import forms

from webapp.review.models import State
from webapp.review.selectors import PairFilter
from webapp.review.services import BULK_MAX_ROWS

BULK_ACTION_CHOICES = [
    ("approve", "Approve (keep chosen/rejected)"),
    ("swap", "Approve swapped (chosen ↔ rejected)"),
    ("reject", "Reject (exclude from training)"),
    ("flag", "Flag"),
    ("reset", "Reset to the reviewers' decisions"),
]
RESOLVE_CHOICES = [("approve", "Approve as is"), ("swap", "Approve swapped"), ("reject", "Reject (exclude)")]


class PairFilterForm(forms.Form):
    state = forms.ChoiceField(choices=[("", "Any state"), *State.choices], required=False)
    flagged = forms.BooleanField(required=False, label="Flagged by a reviewer")
    disagreement = forms.BooleanField(required=False, label="Reviewers disagree")
    data_source = forms.ChoiceField(required=False, label="Data source")
    reviewer = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label="Reviewed by")
    q = forms.CharField(required=False, max_length=200, label="Text contains")
    index_from = forms.IntegerField(required=False, min_value=0, label="From row")
    index_to = forms.IntegerField(required=False, min_value=0, label="To row")

    def __init__(self, *args, sources: list[str], reviewers: list[tuple[int, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["data_source"].choices = [("", "Any source")] + [(s, s or "(empty)") for s in sources]
        self.fields["reviewer"].choices = [("", "Anyone")] + [(pk, name) for pk, name in reviewers]

    def clean(self):
        data = super().clean()
        lo, hi = data.get("index_from"), data.get("index_to")
        if lo is not None and hi is not None and lo > hi:
            self.add_error("index_to", "Must not be below “From row”.")
        return data

    def to_filter(self) -> PairFilter:
        d = self.cleaned_data if self.is_valid() else {}
        return PairFilter(state=d.get("state") or "", flagged=bool(d.get("flagged")),
                          disagreement=bool(d.get("disagreement")), data_source=d.get("data_source") or "",
                          reviewer_id=d.get("reviewer"), q=(d.get("q") or "").strip(),
                          index_from=d.get("index_from"), index_to=d.get("index_to"))


class BulkForm(forms.Form):
    action = forms.ChoiceField(choices=BULK_ACTION_CHOICES)
    scope = forms.ChoiceField(choices=[("selected", "Selected pairs"),
                                       ("matching", f"All pairs matching the filter (up to {BULK_MAX_ROWS:,})")],
                              initial="selected", widget=forms.RadioSelect, label="Apply to")
    rows = forms.TypedMultipleChoiceField(coerce=int, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Any integer is a valid choice here; the service checks the rows belong to the version.
        self.fields["rows"].valid_value = lambda value: str(value).isdigit()

    def clean(self):
        data = super().clean()
        if data.get("scope") == "selected" and not data.get("rows"):
            raise forms.ValidationError("Tick at least one pair, or choose “All pairs matching the filter”.")
        return data


class ResolveForm(forms.Form):
    label = forms.ChoiceField(choices=RESOLVE_CHOICES, widget=forms.RadioSelect, label="Final decision")


class ReleaseForm(forms.Form):
    reviewer = forms.IntegerField(min_value=1)
