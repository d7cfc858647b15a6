from django import forms

from webapp.notifications.models import EVENTS, HookKind


class HookForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=HookKind.choices)
    url = forms.CharField(max_length=1000, required=False, label="URL",
                          help_text="Webhooks: the https:// address to POST to (only its host is shown back).")
    emails = forms.CharField(max_length=1000, required=False, label="E-mail addresses",
                             help_text="E-mail hooks: comma-separated.")
    events = forms.MultipleChoiceField(choices=[(e, e) for e in EVENTS], required=False,
                                       widget=forms.CheckboxSelectMultiple, help_text="None ticked: every event.")
