from __future__ import annotations

from django import forms


class RollbackForm(forms.Form):
    reason = forms.CharField(max_length=400, required=False, widget=forms.Textarea(attrs={"rows": 2}),
                             help_text="Why you are rolling back; it goes to the audit log.")
    lr = forms.FloatField(required=False, min_value=0, label="New learning rate",
                          help_text="Blank keeps the run's value.")
    kl_coef = forms.FloatField(required=False, min_value=0, label="New KL coefficient",
                               help_text="Blank keeps the run's value.")
    stop_parent = forms.BooleanField(required=False, label="Also stop this run (it is still running)")

    def __init__(self, *args, job, **kwargs):
        kwargs.setdefault("initial", {"stop_parent": job.is_active})
        super().__init__(*args, **kwargs)
        if not job.is_active:  # a finished run has nothing to stop: no box that says it is running
            del self.fields["stop_parent"]

    def hp_overrides(self) -> dict[str, float]:
        return {k: self.cleaned_data[k] for k in ("lr", "kl_coef") if self.cleaned_data.get(k) is not None}


class ExportForm(forms.Form):
    variant = forms.ChoiceField(choices=[("merged", "Merged into the base model"), ("adapter", "LoRA adapter only")],
                                required=False, initial="merged")


class HumanEvalForm(forms.Form):
    limit = forms.IntegerField(min_value=1, max_value=500, initial=50, label="Items")
