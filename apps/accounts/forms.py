from django import forms

from apps.fleet.validators import validate_no_nul


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        validators=[validate_no_nul],
        help_text="what it is for, e.g. ci-runner: the audit log names the token with each change",
    )
    expires_in_days = forms.TypedChoiceField(
        label="Expires",
        coerce=int,
        empty_value=None,
        required=False,
        initial="90",
        choices=[
            ("", "never"),
            ("1", "in 1 day"),
            ("7", "in 7 days"),
            ("30", "in 30 days"),
            ("90", "in 90 days"),
            ("365", "in a year"),
        ],
    )
