import time
from datetime import datetime, timezone

import msgspec
from django import forms

from apps.fleet.models import Cluster
from apps.monitoring import live, status

from .choices import OnDrainTimeout
from .rule_settings import FIELDS

DRAIN_TIMEOUT_MIN_MS, DRAIN_TIMEOUT_MAX_MS = 50, 600_000  # the forms' and the API's bounds


class SwitchoverForm(forms.Form):
    new_writer = forms.ModelChoiceField(queryset=None, label="New writer")
    drain_timeout_ms = forms.IntegerField(
        label="Drain timeout (ms)", min_value=DRAIN_TIMEOUT_MIN_MS, max_value=DRAIN_TIMEOUT_MAX_MS
    )
    on_timeout = forms.ChoiceField(
        label="If the drain does not finish in time",
        choices=OnDrainTimeout.choices,
        initial=OnDrainTimeout.ROLLBACK,
        widget=forms.RadioSelect,
    )
    lower_autoinc = forms.TypedChoiceField(
        label="Lower mysql-auto_increment_delay_multiplex to 0 during the drain (restored after, and on rollback)",
        choices=[
            ("auto", "when sessions are pinned by auto-increment tokens (the plan says why)"),
            ("on", "yes"),
            ("off", "no (a drain held by auto-increment tokens will not finish)"),
        ],
        coerce=lambda v: {"on": True, "off": False}.get(v),
        empty_value=None,
        initial="auto",
        required=False,
        widget=forms.RadioSelect,
    )
    old_writer_to = forms.ChoiceField(
        label="Old writer afterwards",
        initial="reader",
        choices=[
            ("reader", "ONLINE in the reader hostgroup"),
            ("offline", "not a reader (its reader row, if any, OFFLINE_SOFT)"),
        ],
    )

    def __init__(self, *args, cluster, exclude_server=None, **kwargs):
        super().__init__(*args, **kwargs)
        servers = cluster.servers.all()
        if exclude_server is not None:
            servers = servers.exclude(pk=exclude_server.pk)
        self.fields["new_writer"].queryset = servers
        self.fields["new_writer"].label_from_instance = candidate_label(cluster, servers)
        self.fields["drain_timeout_ms"].initial = cluster.drain_timeout_ms


class CandidatePoll(msgspec.Struct):
    """What the switchover form reads of a candidate backend's latest-state document (live_doc.BackendNodeDoc)."""

    ts: float
    ok: bool = True
    state: dict | None = None  # clients.backend.NodeState's fields


def candidate_label(cluster, servers):
    """Each candidate as its last backend poll saw it ("127.0.0.1:3312 · Synced · recv queue 0"), so the operator
    picks with the state in view; the plan's guards still check it at planning and again at start. One MGET."""
    now = time.time()
    try:
        docs = live.read_typed(live.BACKEND, [s.pk for s in servers], CandidatePoll)
    except live.LiveUnavailable:
        docs = {}

    def label(server):
        doc = docs.get(server.pk)
        state, _ = (
            status.freshness_of(doc.ts, doc.ok, cluster.backend_poll_interval_s, now) if doc else (status.NODATA, None)
        )
        if state != status.OK:
            return f"{server} · {'no recent poll' if state in (status.NODATA, status.STALE) else state}"
        words = [str(server), status.wsrep_label_of(doc.state) or "answering"]
        queue = (doc.state or {}).get("local_recv_queue")
        if queue is not None:
            words.append(f"recv queue {queue}")
        return " · ".join(words)

    return label


class NodePoll(msgspec.Struct):
    """What a form reads of a ProxySQL node's latest-state document (live_doc.ProxySQLNodeDoc)."""

    ts: float
    ok: bool = True
    error_kind: str | None = None
    error_since: float | None = None
    last_ok: float | None = None


def silent_nodes(cluster, now=None):
    """The cluster's ProxySQL nodes whose last poll failed or is stale, in words, for the forms of operations that
    change every node: the operator learns before planning that the plan will be refused until they answer.
    One MGET; nothing when Redis is down (the plan still checks every node)."""
    now = now or time.time()
    nodes = list(cluster.proxysql_nodes.order_by("name"))
    try:
        docs = live.read_typed(live.PROXYSQL, [n.pk for n in nodes], NodePoll)
    except live.LiveUnavailable:
        return []
    out = []
    for node in nodes:
        doc = docs.get(node.pk)
        state, _ = status.freshness_of(doc.ts, doc.ok, cluster.poll_interval_s, now) if doc else (status.NODATA, None)
        if state in (status.OK, status.NODATA):
            continue
        since = doc.error_since if state == status.UNREACHABLE else (doc.last_ok or doc.ts)
        when = datetime.fromtimestamp(since or doc.ts, tz=timezone.utc).strftime("%H:%M:%S")
        how = (
            f"has not answered since {when} UTC ({doc.error_kind or 'error'})"
            if state == status.UNREACHABLE
            else f"has not been polled since {when} UTC"
        )
        out.append(f"{node.name} ({node.admin_host}:{node.admin_port}) {how}")
    return out


class ConfirmForm(forms.Form):
    override_reason = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Reason to override the failed guards (admin only, audited)",
    )


# A drained backend is not a writer: its choices say what is cut in its words, not the switchover's.
DRAIN_ON_TIMEOUT = [
    (OnDrainTimeout.ROLLBACK, "roll back (nothing is cut)"),
    (OnDrainTimeout.OFFLINE_HARD, "proceed with OFFLINE_HARD (cuts the sessions still on this backend)"),
]


class DrainForm(forms.Form):
    drain_timeout_ms = forms.IntegerField(
        label="Drain timeout (ms)", min_value=DRAIN_TIMEOUT_MIN_MS, max_value=DRAIN_TIMEOUT_MAX_MS
    )
    on_timeout = forms.ChoiceField(
        label="If the drain does not finish in time",
        choices=DRAIN_ON_TIMEOUT,
        initial=OnDrainTimeout.ROLLBACK,
        widget=forms.RadioSelect,
    )
    note = forms.CharField(
        label="Why (shown on the server page and in the audit log)", max_length=2000, required=False, strip=False
    )

    def clean_note(self):
        note = self.cleaned_data["note"]
        if "\x00" in note:
            raise forms.ValidationError("NUL characters are not allowed.")
        return note


class RuleSettingsForm(forms.ModelForm):
    """A cluster's read-pool rules and automatic failover settings; the fields beyond the user's role are shown
    disabled (Django keeps their current value whatever is posted)."""

    class Meta:
        model = Cluster
        fields = FIELDS
        labels = {
            "max_replication_lag": "Take a desynced reader out above this recv queue (Galera) or lag in seconds "
            "(async); also the switchover's and restore's limit",
            "reader_return_mark": "It comes back once its recv queue stays at or under (empty: half of the above)",
            "reader_return_after_s": "...for this many seconds",
            "offline_hard_grace_s": "A broken node goes OFFLINE_SOFT at once, OFFLINE_HARD after (s)",
            "min_available_readers": "Never fewer ONLINE readers than",
            "read_pool_rules_enabled": "Read-pool rules on",
            "rules_dry_run": "Dry run: decide and record, change nothing",
            "auto_failover_enabled": "Automatic failover on",
            "failover_after_polls": "Fail over after this many bad backend polls in a row (and a re-probe)",
            "failback_enabled": "Automatic failback to the preferred writer on",
            "failback_after_s": "Fail back once the preferred writer has stayed Synced for (s)",
        }
        help_texts = {f: "" for f in FIELDS if f != "failover_after_polls"}  # the labels above say it

    def __init__(self, *args, editable=(), **kwargs):
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            field.disabled = name not in editable
