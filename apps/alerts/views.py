"""Alert pages: the list (live), one alert with its evidence, silences, rules (fleet-wide and per cluster),
channels with their delivery log and a "send a test" button. Viewers read; operators acknowledge, silence
and tune a cluster's rules; admins set the fleet-wide rules and the channels (which hold secrets)."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER, require_role
from apps.audit.actor import Actor
from apps.audit.services import record
from apps.fleet.models import Cluster
from controlplane.converters import parse_id

from . import notify, rulesettings, selectors, services
from .catalogue import BY_KEY, RULES
from .forms import AckForm, ChannelForm, RuleSettingForm, SilenceForm
from .models import Alert, Channel, RuleSetting, Silence


@require_role(VIEWER)
@require_GET
def alert_list(request):
    return TemplateResponse(request, "alerts/list.html", _list_context(request))


@require_role(VIEWER)
@require_GET
def alert_list_live(request):
    return TemplateResponse(request, "alerts/list.html#live", _list_context(request))


def _list_context(request):
    f = selectors.parse_filters(request.GET)
    context = selectors.alert_list(f)
    context["clusters"] = Cluster.objects.order_by("name").only("name")
    query = {
        k: v
        for k, v in (
            ("cluster", f.cluster),
            ("state", f.state if f.state != "all" else ""),
            ("severity", f.severity),
            ("rule", f.rule),
        )
        if v
    }
    context["query"] = "&".join(f"{k}={v}" for k, v in query.items())
    return context


def _alert(pk):
    alert = get_object_or_404(
        Alert.objects.select_related("cluster", "node", "server", "operation", "hold_operation"), pk=pk
    )
    # "Notified: no" says why when no enabled channel takes this alert (its cluster, its severity)
    alert.routed_channels = sum(1 for ch in notify.channels_now() if notify.routed(ch, alert))
    return alert


@require_role(VIEWER)
@require_GET
def alert_detail(request, pk):
    alert = _alert(pk)
    return TemplateResponse(
        request,
        "alerts/detail.html",
        {
            "alert": alert,
            "spec": BY_KEY.get(alert.rule),
            "evidence": selectors.evidence(alert),
            "ack_form": AckForm(),
            "silence_form": SilenceForm(
                initial={
                    "cluster": alert.cluster_id,
                    "rule": alert.rule,
                    "subject": alert.subject,
                    "subject_label": alert.subject_label,
                }
            ),
        },
    )


@require_role(VIEWER)
@require_GET
def alert_state(request, pk):
    """Live fragment of the detail page: the alert's state and figures."""
    alert = _alert(pk)
    return TemplateResponse(request, "alerts/detail.html#state", {"alert": alert, "spec": BY_KEY.get(alert.rule)})


@require_role(OPERATOR)
@require_POST
def acknowledge(request, pk):
    alert = _alert(pk)
    form = AckForm(request.POST)
    if not form.is_valid():
        record(
            "acknowledge alert",
            request=request,
            outcome="invalid",
            cluster=alert.cluster,
            details={"alert": alert.pk, "errors": form.errors.get_json_data()},
        )
        messages.error(request, "The note is not valid: " + "; ".join(e for errs in form.errors.values() for e in errs))
        return redirect(alert)
    services.acknowledge(alert, form.cleaned_data["note"], actor=Actor.of_request(request))
    messages.success(request, f"Alert #{alert.pk} acknowledged.")
    return redirect(request.POST.get("next") if request.POST.get("next") == "/alerts/" else alert.get_absolute_url())


@require_role(VIEWER)
@require_GET
def silence_list(request):
    initial = {}
    cluster = request.GET.get("cluster", "")
    if parse_id(cluster) is not None:
        initial["cluster"] = str(parse_id(cluster))
    return TemplateResponse(
        request, "alerts/silences.html", {**selectors.silences(), "form": SilenceForm(initial=initial)}
    )


@require_role(OPERATOR)
@require_POST
def silence_create(request):
    form = SilenceForm(request.POST)
    from_alert = None
    alert_pk = request.POST.get("from_alert", "")
    if parse_id(alert_pk) is not None:
        from_alert = Alert.objects.filter(pk=parse_id(alert_pk)).first()
    if not form.is_valid():
        record("silence alerts", request=request, outcome="invalid", details={"errors": form.errors.get_json_data()})
        return TemplateResponse(request, "alerts/silences.html", {**selectors.silences(), "form": form}, status=400)
    d = form.cleaned_data
    try:
        s = services.silence(
            cluster=d["cluster"],
            rule=d["rule"],
            subject=d["subject"],
            subject_label=d["subject_label"],
            minutes=d["minutes"],
            reason=d["reason"],
            actor=Actor.of_request(request),
            from_alert=from_alert,
        )
    except services.Refused as exc:
        form.add_error(None, str(exc))
        return TemplateResponse(request, "alerts/silences.html", {**selectors.silences(), "form": form}, status=400)
    messages.success(request, f"Silenced until {s.ends_at:%Y-%m-%d %H:%M} UTC: {s.describe()}.")
    return redirect(from_alert.get_absolute_url() if from_alert else "alerts:silences")


@require_role(OPERATOR)
@require_POST
def silence_end(request, pk):
    s = get_object_or_404(Silence, pk=pk)
    try:
        services.end_silence(s, actor=Actor.of_request(request))
        messages.success(request, f"Silence #{s.pk} ended.")
    except services.Refused as exc:
        messages.error(request, str(exc))
    return redirect("alerts:silences")


# -- rules -------------------------------------------------------------------------------------------
def _rule_rows(cluster):
    own = {s.rule: s for s in RuleSetting.objects.filter(cluster=cluster)}
    rows = []
    for spec in RULES:
        if cluster is None:
            eff = rulesettings.effective(_Fleet(), spec.key)
        else:
            eff = rulesettings.effective(cluster, spec.key)
        rows.append(
            {
                "spec": spec,
                "effective": eff,
                "own": own.get(spec.key),
                "overridden": {f for level, f in eff.overridden if level == ("cluster" if cluster else "fleet")},
            }
        )
    return rows


class _Fleet:
    """Stands for "no cluster" when showing fleet-wide values: defaults that come from a cluster's policy
    show as such."""

    pk = None
    min_available_readers = None
    max_replication_lag = None


@require_role(VIEWER)
@require_GET
def rules(request):
    return TemplateResponse(
        request,
        "alerts/rules.html",
        {"rows": _rule_rows(None), "cluster": None, "clusters": Cluster.objects.order_by("name").only("name")},
    )


@require_role(VIEWER)
@require_GET
def cluster_rules(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    return TemplateResponse(request, "alerts/rules.html", {"rows": _rule_rows(cluster), "cluster": cluster})


def _edit_rule(request, cluster, rule, template_back):
    if rule not in BY_KEY:
        messages.error(request, "No such rule.")
        return redirect(template_back)
    form = RuleSettingForm(request.POST, rule=rule)
    if not form.is_valid():
        record(
            "change alert rule",
            request=request,
            cluster=cluster,
            outcome="invalid",
            target=rule,
            details={"errors": form.errors.get_json_data()},
        )
        messages.error(
            request, f"{BY_KEY[rule].title}: " + "; ".join(f"{k}: {e}" for k, errs in form.errors.items() for e in errs)
        )
        return redirect(template_back)
    d = form.cleaned_data
    services.save_rule_setting(
        cluster,
        rule,
        enabled=d["enabled"],
        severity=d["severity"],
        for_s=d["for_s"],
        params=form.params(),
        actor=Actor.of_request(request),
    )
    messages.success(request, f"{BY_KEY[rule].title}: saved for {cluster.name if cluster else 'the whole fleet'}.")
    return redirect(template_back)


@require_role(ADMIN)
@require_POST
def rule_edit(request, rule):
    return _edit_rule(request, None, rule, "alerts:rules")


@require_role(OPERATOR)
@require_POST
def cluster_rule_edit(request, pk, rule):
    cluster = get_object_or_404(Cluster, pk=pk)
    return _edit_rule(request, cluster, rule, reverse("alerts:cluster_rules", args=[cluster.pk]))


# -- channels ----------------------------------------------------------------------------------------
@require_role(VIEWER)
@require_GET
def channel_list(request):
    return TemplateResponse(request, "alerts/channels.html", {"channels": selectors.channels(), "form": ChannelForm()})


@require_role(ADMIN)
@require_POST
def channel_create(request):
    form = ChannelForm(request.POST)
    if not form.is_valid():
        record("add alert channel", request=request, outcome="invalid", details={"errors": form.errors.get_json_data()})
        return TemplateResponse(
            request, "alerts/channels.html", {"channels": selectors.channels(), "form": form}, status=400
        )
    ch = services.save_channel(form, actor=Actor.of_request(request))
    if ch is None:  # refused at save: the form says why
        return TemplateResponse(
            request, "alerts/channels.html", {"channels": selectors.channels(), "form": form}, status=400
        )
    messages.success(request, f"Channel {ch.name} added.")
    return redirect(ch)


@require_role(VIEWER)
@require_GET
def channel_detail(request, pk):
    ch = get_object_or_404(Channel, pk=pk)
    return TemplateResponse(request, "alerts/channel.html", _channel_context(ch, ChannelForm(instance=ch)))


@require_role(ADMIN)
@require_POST
def channel_edit(request, pk):
    ch = get_object_or_404(Channel, pk=pk)
    form = ChannelForm(request.POST, instance=ch)
    if not form.is_valid():
        record(
            "change alert channel",
            request=request,
            outcome="invalid",
            target=ch.name,
            details={"errors": form.errors.get_json_data()},
        )
        return TemplateResponse(request, "alerts/channel.html", _channel_context(ch, form), status=400)
    if services.save_channel(form, actor=Actor.of_request(request)) is None:
        return TemplateResponse(request, "alerts/channel.html", _channel_context(ch, form), status=400)
    messages.success(request, "Channel saved.")
    return redirect(ch)


def _channel_context(ch, form):
    notifications = list(ch.notifications.prefetch_related("tries").order_by("-id")[:50])
    return {"channel": ch, "form": form, "notifications": notifications}


@require_role(ADMIN)
@require_POST
def channel_delete(request, pk):
    ch = get_object_or_404(Channel, pk=pk)
    services.delete_channel(ch, actor=Actor.of_request(request))
    messages.success(request, f"Channel {ch.name} deleted.")
    return redirect("alerts:channels")


@require_role(OPERATOR)
@require_POST
def channel_test(request, pk):
    ch = get_object_or_404(Channel, pk=pk)
    n = services.send_test(ch, actor=Actor.of_request(request))
    messages.success(request, f"Test notification #{n.pk} queued: its delivery shows below within seconds.")
    return redirect(ch)


@require_role(VIEWER)
@require_GET
def channel_log(request, pk):
    """Live fragment: the channel's delivery log."""
    ch = get_object_or_404(Channel, pk=pk)
    return TemplateResponse(request, "alerts/channel.html#log", _channel_context(ch, None))


@require_role(VIEWER)
@require_GET
def cluster_alerts(request, pk):
    """Live fragment for the cluster page: its open alerts and the last day's resolved ones."""
    cluster = get_object_or_404(Cluster, pk=pk)
    return TemplateResponse(
        request, "alerts/_cluster.html", {"cluster": cluster, **selectors.open_for_cluster(cluster)}
    )
