from django import forms
from django.contrib.auth.forms import AuthenticationForm

from webapp.core.models import Role
from webapp.core.throttling import lockout_message, login_locked


class LoginForm(AuthenticationForm):
    """Django's login form; while a lockout runs it says so instead of checking the password."""

    def clean(self):
        if self.request is not None and login_locked(self.request, self.cleaned_data.get("username")):
            raise forms.ValidationError(lockout_message(), code="locked")
        return super().clean()


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=200)
    slug = forms.SlugField(max_length=64, required=False, help_text="Used in URLs; derived from the name if empty.")
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices)


class JoinForm(forms.Form):
    """The password of an account created from an invitation's link (the username is the invitation's)."""

    password1 = forms.CharField(label="Password", strip=False,
                                widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))
    password2 = forms.CharField(label="The password again", strip=False,
                                widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))


class ProjectSettingsForm(forms.Form):
    review_overlap = forms.IntegerField(min_value=1, max_value=10, label="Reviewers per pair (overlap)")
    review_blind = forms.BooleanField(required=False,
                                      label="Blind review (reviewers do not see each other's decisions)")


def apply_error(form: forms.Form, exc) -> None:
    """Show an ApplicationError next to its field (or at the top of the form)."""
    field = exc.field if exc.field in form.fields else None
    form.add_error(field, exc.message)
