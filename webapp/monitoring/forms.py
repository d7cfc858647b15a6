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


class ArenaForm(forms.Form):
    """Only parses: the arena service validates sides, prompts and sampling settings."""

    side_a = forms.ChoiceField(label="Side A")
    side_b = forms.ChoiceField(label="Side B")
    source = forms.ChoiceField(choices=[("typed", "Typed prompts"), ("dataset", "From a dataset version")],
                               widget=forms.RadioSelect, initial="typed", label="Prompts")
    prompts = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}),
                              help_text="One prompt per line (write \\n for a line break inside a prompt).")
    dataset_version = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label="Dataset version")
    split = forms.ChoiceField(choices=[("val", "Validation rows"), ("train", "Training rows"), ("all", "All rows")],
                              initial="val", required=False)
    limit = forms.IntegerField(min_value=1, max_value=500, initial=20, required=False, label="How many prompts")
    max_response_length = forms.IntegerField(initial=64, label="Max response length (tokens)")
    temperature = forms.FloatField(initial=0.7, help_text="0 is greedy (then the seed does not matter).")
    top_p = forms.FloatField(initial=1.0, label="Top-p")
    seed = forms.IntegerField(required=False, min_value=0, help_text="Blank picks one; it is recorded either way.")
    title = forms.CharField(required=False, max_length=200)

    def __init__(self, *args, sides: list[tuple[str, str]], versions: list[tuple[int, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["side_a"].choices = sides
        self.fields["side_b"].choices = sides
        self.fields["dataset_version"].choices = [("", "—")] + versions
        if len(sides) > 1 and not self.is_bound:
            self.initial.setdefault("side_a", sides[1][0])  # sides come newest first: A the older, B the newer
            self.initial.setdefault("side_b", sides[0][0])

    def sampling(self) -> dict:
        return {k: self.cleaned_data.get(k) for k in ("max_response_length", "temperature", "top_p")}


class ArenaExportForm(forms.Form):
    name = forms.CharField(required=False, max_length=200, label="Dataset name",
                           help_text="A new version of this dataset (created if needed).")
    split = forms.CharField(required=False, max_length=32, initial="10%", label="Validation split",
                            help_text="A share (10%) or a number of rows.")
    agreed_only = forms.BooleanField(required=False, label="Only judgements that agree with the pair's majority",
                                     help_text="Leaves out a reviewer outvoted on a pair, and pairs where "
                                               "reviewers split evenly: no contradicting pairs in the dataset.")
