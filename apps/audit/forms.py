"""The review page's filters (GET). Times are UTC, as the pages show them."""

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django import forms
from django.utils import timezone

from apps.fleet.models import Cluster

from .models import Outcome

QUICK_RANGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
TIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"]


# Times outside these bounds are refused with a message: the pages add windows of up to a few weeks to
# them, which near year 1 or 9999 leaves what a datetime can hold (an OverflowError, a 500).
EARLIEST = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)
LATEST = datetime(9999, 1, 1, tzinfo=dt_timezone.utc)


class UTCDateTimeField(forms.DateTimeField):
    """A wall-clock time read as UTC whatever TIME_ZONE says, between EARLIEST and LATEST."""

    # A text field, not datetime-local: a browser draws that in its locale (12-hour in en-US) under a "UTC" label.
    widget = forms.DateTimeInput(
        attrs={
            "placeholder": "YYYY-MM-DD HH:MM:SS",
            "size": "19",
            "maxlength": "19",
            "pattern": r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?",
            "title": "24-hour UTC: YYYY-MM-DD HH:MM:SS",
        },
        format="%Y-%m-%d %H:%M:%S",
    )

    def __init__(self, **kwargs):
        super().__init__(input_formats=TIME_FORMATS, required=False, **kwargs)

    def to_python(self, value):
        result = super().to_python(value)
        if result is None:
            return None
        result = result.replace(tzinfo=dt_timezone.utc)
        if not EARLIEST <= result <= LATEST:
            raise forms.ValidationError(
                f"must be between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC)", code="out_of_range"
            )
        return result


class FilterForm(forms.Form):
    range = forms.ChoiceField(required=False, choices=[("", "any time")] + [(k, f"last {k}") for k in QUICK_RANGES])
    start = UTCDateTimeField(label="From (UTC)")
    end = UTCDateTimeField(label="To (UTC)")
    actor = forms.CharField(
        required=False,
        max_length=150,
        widget=forms.TextInput(attrs={"list": "audit-actors", "placeholder": "exact name"}),
    )
    cluster = forms.ModelChoiceField(
        required=False, queryset=Cluster.objects.order_by("name"), empty_label="any cluster"
    )
    target = forms.CharField(
        required=False,
        max_length=300,
        label="Node / target",
        widget=forms.TextInput(attrs={"list": "audit-targets", "placeholder": "contains"}),
    )
    action = forms.CharField(
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"list": "audit-actions", "placeholder": "exact name"}),
    )
    outcome = forms.ChoiceField(required=False, choices=[("", "any outcome")] + list(Outcome.choices))
    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "words in any field or the details"}),
    )

    FIELDS = ("range", "start", "end", "actor", "cluster", "target", "action", "outcome", "q")

    def clean(self):
        data = super().clean()
        if data.get("start") and data.get("end") and data["start"] >= data["end"]:
            self.add_error("end", "must be after from")
        return data

    def window(self, now=None):
        """(start, end) as aware datetimes or None: explicit times win over a quick range."""
        data = getattr(self, "cleaned_data", {})
        start, end = data.get("start"), data.get("end")
        if not start and not end and data.get("range") in QUICK_RANGES:
            now = now or timezone.now()
            return now - QUICK_RANGES[data["range"]], None
        return start, end

    def applied(self):
        """The valid, non-empty filters, for links that keep them (paging, export, quick ranges)."""
        if not self.is_bound:
            return {}
        data = getattr(self, "cleaned_data", {})
        out = {}
        for name in self.FIELDS:
            if name in self.errors:
                continue
            raw = self.data.get(name, "")
            if raw not in ("", None) and data.get(name) not in ("", None):
                out[name] = raw
        return out
