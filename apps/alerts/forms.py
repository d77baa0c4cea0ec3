from django import forms
from django.conf import settings

from apps.fleet.models import Cluster
from apps.fleet.validators import validate_no_nul
from controlplane.converters import IdsField

from . import destinations
from .catalogue import BY_KEY, RULES, SEVERITIES
from .models import Channel, ChannelKind

SILENCE_DURATIONS = [
    (30, "30 minutes"),
    (60, "1 hour"),
    (120, "2 hours"),
    (240, "4 hours"),
    (480, "8 hours"),
    (1440, "1 day"),
    (4320, "3 days"),
    (10080, "1 week"),
]


class AckForm(forms.Form):
    note = forms.CharField(
        max_length=2000,
        required=False,
        validators=[validate_no_nul],
        widget=forms.TextInput(attrs={"placeholder": "what you are doing about it"}),
    )


EVERY = "every"  # chosen on purpose: a new silence starts on "choose...", never on every cluster and every rule


def _clusters():
    return [("", "choose a cluster…"), (EVERY, "every cluster")] + [
        (str(pk), name) for pk, name in Cluster.objects.order_by("name").values_list("pk", "name")
    ]


class SilenceForm(forms.Form):
    cluster = forms.ChoiceField(required=False, choices=_clusters)
    rule = forms.ChoiceField(
        required=False, choices=[("", "choose a rule…"), (EVERY, "every rule")] + [(r.key, r.title) for r in RULES]
    )
    subject = forms.CharField(
        max_length=200,
        required=False,
        validators=[validate_no_nul],
        help_text="one subject only (set when silencing from an alert); empty: every subject",
    )
    subject_label = forms.CharField(max_length=300, required=False, widget=forms.HiddenInput)
    minutes = forms.TypedChoiceField(choices=SILENCE_DURATIONS, coerce=int, initial=120, label="for")
    reason = forms.CharField(
        max_length=2000,
        validators=[validate_no_nul],
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "why (shown with the silence, audited)"}),
    )

    def clean_cluster(self):
        value = self.cleaned_data["cluster"]
        if value in ("", EVERY):
            return value
        return Cluster.objects.filter(pk=value).first()  # a choice, so it exists (bar a race: then none chosen)

    def clean(self):
        data = super().clean()
        cluster, rule = data.get("cluster"), data.get("rule")
        if cluster in ("", EVERY, None) and rule in ("", EVERY, None) and not data.get("subject"):
            raise forms.ValidationError(
                "Choose at least a cluster, a rule or a subject: a silence of everything everywhere is not allowed."
            )
        if cluster == "" or rule == "":
            raise forms.ValidationError("Choose a cluster (or every cluster) and a rule (or every rule).")
        data["cluster"] = None if cluster == EVERY else cluster
        data["rule"] = "" if rule == EVERY else rule
        return data


class RuleSettingForm(forms.Form):
    """One rule's override. Empty fields inherit (from the fleet-wide setting, then the built-in default)."""

    enabled = forms.TypedChoiceField(
        required=False,
        coerce=lambda v: {"on": True, "off": False}.get(v),
        empty_value=None,
        choices=[("", "inherit"), ("on", "on"), ("off", "off")],
    )
    severity = forms.ChoiceField(required=False, choices=[("", "inherit")] + [(s, s) for s in SEVERITIES])
    for_s = forms.FloatField(required=False, min_value=0, max_value=7 * 86400, label="for (s)")

    def __init__(self, *args, rule, **kwargs):
        super().__init__(*args, **kwargs)
        self.spec = BY_KEY[rule]
        for name, p in self.spec.params.items():
            self.fields[f"p_{name}"] = forms.FloatField(
                required=False, min_value=p.minimum, max_value=p.maximum, label=f"{p.label} ({p.unit})"
            )

    def params(self):
        return {
            name: self.cleaned_data.get(f"p_{name}")
            for name in self.spec.params
            if self.cleaned_data.get(f"p_{name}") is not None
        }


class ChannelForm(forms.ModelForm):
    url = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="webhook URL; PagerDuty: the Events API v2 enqueue URL; Alertmanager: its base URL. "
        "Never shown again (it is a secret): empty keeps the stored one",
    )
    new_secret = forms.CharField(
        required=False,
        max_length=500,
        label="Secret",
        widget=forms.PasswordInput(render_value=False),
        help_text="PagerDuty: the integration's routing key (required); webhook or "
        "Alertmanager: a bearer token, optional. Empty keeps the stored one.",
    )

    class Meta:
        model = Channel
        fields = ["name", "kind", "url", "recipients", "min_severity", "clusters", "send_resolved", "enabled"]
        widgets = {"clusters": forms.CheckboxSelectMultiple, "recipients": forms.TextInput}
        field_classes = {"clusters": IdsField}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["clusters"].queryset = Cluster.objects.order_by("name")
        self.fields["name"].validators.append(validate_no_nul)
        self.fields["recipients"].validators.append(validate_no_nul)
        url = self.fields["url"]
        self.initial.pop("url", None)  # never rendered back: re-entered or kept
        if self.instance.url:
            url.help_text = f"Posts to {self.instance.destination}. {url.help_text}"
        if settings.ALERT_CHANNEL_DESTINATIONS:
            url.help_text += f". Allowed destinations: {', '.join(settings.ALERT_CHANNEL_DESTINATIONS)}"

    def clean_url(self):
        return self.cleaned_data.get("url") or self.instance.url or ""

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind == ChannelKind.EMAIL:
            addresses = [a.strip() for a in (data.get("recipients") or "").split(",") if a.strip()]
            if not addresses:
                self.add_error("recipients", "An e-mail channel needs at least one address.")
            for a in addresses:
                try:
                    forms.EmailField().clean(a)
                except forms.ValidationError:
                    self.add_error("recipients", f"Not an e-mail address: {a[:100]}")
        elif kind and not data.get("url"):
            self.add_error("url", "This kind of channel needs a URL.")
        elif kind and destinations.refusal(data["url"]):
            self.add_error("url", destinations.refusal(data["url"]))
        if kind == ChannelKind.PAGERDUTY and not (data.get("new_secret") or self.instance.secret):
            self.add_error("new_secret", "PagerDuty needs the routing key of its Events API v2 integration.")
        return data
