from django import forms

from apps.fleet.models import Cluster

from .choices import Period
from .models import ReportSchedule, split_recipients, validate_recipients


class BuildForm(forms.Form):
    """An operator's on-demand report."""

    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.order_by("name"), required=False, empty_label="the whole fleet", label="Of"
    )
    period = forms.ChoiceField(choices=Period.choices, initial=Period.DAILY, label="Period")
    when = forms.ChoiceField(
        choices=[("last", "the last complete day / week"), ("rolling", "up to now (24 h / 7 days)")],
        initial="last",
        label="Covering",
    )


class SendForm(forms.Form):
    recipients = forms.CharField(
        max_length=5000, validators=[validate_recipients], help_text="comma-separated e-mail addresses"
    )

    def clean_recipients(self):
        value = split_recipients(self.cleaned_data["recipients"])
        if not value:
            raise forms.ValidationError("Give at least one address.")
        return value


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = ReportSchedule
        fields = ["cluster", "period", "hour", "weekday", "recipients", "enabled"]
        widgets = {"recipients": forms.Textarea(attrs={"rows": 3})}
        labels = {"cluster": "Cluster (empty: the whole fleet)"}

    def clean(self):
        data = super().clean()
        recipients = data.get("recipients") or ""
        if "\x00" in recipients:
            self.add_error("recipients", "NUL characters are not allowed.")
        same = ReportSchedule.objects.filter(cluster=data.get("cluster"), period=data.get("period"))
        if self.instance.pk:
            same = same.exclude(pk=self.instance.pk)
        if data.get("period") and same.exists():
            raise forms.ValidationError("There is already a schedule for this scope and period: edit that one.")
        return data
