import re
from urllib.parse import urlencode

from django import forms

from . import tags
from .choices import ClusterKind, WriterIsAlsoReader
from .models import HOSTGROUP_MAX, Cluster
from .selectors import ServerFilter
from .validators import parse_endpoint, validate_hostname, validate_name, validate_no_nul

_hostgroup = dict(required=False, min_value=0, max_value=HOSTGROUP_MAX)
BACKEND_HOSTS_MAX = 1000


def parse_backend_hosts(text):
    """[(host, port)] from "db1:3306, 10.0.0.5:3306" (spaces, commas or lines between), or ValidationError naming the
    entry: the backends a person confirms may receive a new cluster's monitor credentials at adoption."""
    out = []
    for entry in (e for e in re.split(r"[\s,]+", text or "") if e):
        try:
            host, port = parse_endpoint(entry)
            validate_hostname(host)
        except ValueError as exc:
            raise forms.ValidationError(f"Backend {entry[:80]!r}: {exc}; write each as HOST:PORT.") from None
        except forms.ValidationError as exc:
            raise forms.ValidationError(f"Backend {entry[:80]!r}: {' '.join(exc.messages)}") from None
        if (host, port) not in out:
            out.append((host, port))
    if len(out) > BACKEND_HOSTS_MAX:
        raise forms.ValidationError(f"At most {BACKEND_HOSTS_MAX} backends.")
    return out


ROLE_FIELDS = {
    "writer": "writer_hostgroup",
    "reader": "reader_hostgroup",
    "backup_writer": "backup_writer_hostgroup",
    "offline": "offline_hostgroup",
}


def parse_hostgroups(text):
    """Hostgroup ids from "100, 101 102" (sorted, once each); ValidationError naming a bad one."""
    ids = set()
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        if not (part.isascii() and part.isdigit()) or len(part) > 10 or int(part) > HOSTGROUP_MAX:
            raise forms.ValidationError(f"{part!r} is not a hostgroup id (a whole number from 0 to {HOSTGROUP_MAX}).")
        ids.add(int(part))
    return sorted(ids)


class RolesForm(forms.Form):
    """A new cluster's kind, hostgroup roles and writer-is-also-reader policy as the operator corrects them;
    what is left empty is inferred from the node. Also validates the adopt_proxysql command's options."""

    kind = forms.ChoiceField(label="Cluster kind", choices=[("", "(detect)")] + ClusterKind.choices, required=False)
    writer_hostgroup = forms.IntegerField(label="Writer hostgroup", **_hostgroup)
    reader_hostgroup = forms.IntegerField(label="Reader hostgroup", **_hostgroup)
    backup_writer_hostgroup = forms.IntegerField(label="Backup writer hostgroup", **_hostgroup)
    offline_hostgroup = forms.IntegerField(label="Offline hostgroup", **_hostgroup)
    writer_is_also_reader = forms.TypedChoiceField(
        label="Writer is also reader",
        choices=[("", "(detect from the layout)")] + WriterIsAlsoReader.choices,
        coerce=int,
        empty_value=None,
        required=False,
    )

    def clean(self):
        data = super().clean()
        ids = [data.get(f) for f in ROLE_FIELDS.values() if data.get(f) is not None]
        if len(ids) != len(set(ids)):
            self.add_error(None, "Each hostgroup role needs a different hostgroup id.")
        return data

    @property
    def roles(self):
        return {role: self.cleaned_data.get(name) for role, name in ROLE_FIELDS.items()}


class AdoptForm(RolesForm):
    """Where the ProxySQL admin endpoint is, and where in the inventory it goes."""

    admin_host = forms.CharField(label="Admin host", max_length=255, validators=[validate_hostname])
    admin_port = forms.IntegerField(label="Admin port", initial=6032, min_value=1, max_value=65535)
    admin_user = forms.CharField(label="Admin user", max_length=80, validators=[validate_no_nul])
    # Never rendered back: the browser must send it again after a failed submit.
    admin_password = forms.CharField(
        label="Admin password",
        max_length=200,
        required=False,
        widget=forms.PasswordInput(render_value=False),
        validators=[validate_no_nul],
    )
    node_name = forms.CharField(label="Name of this ProxySQL node", max_length=200, validators=[validate_no_nul])
    cluster = forms.ModelChoiceField(
        label="Existing cluster", queryset=Cluster.objects.all(), required=False, empty_label="(a new cluster)"
    )
    new_cluster_name = forms.CharField(
        label="New cluster name", max_length=200, required=False, validators=[validate_name]
    )
    hostgroups = forms.CharField(
        label="Hostgroups of this cluster",
        max_length=2000,
        required=False,
        help_text="For a ProxySQL that fronts several clusters: the hostgroup ids (comma-separated) that are this "
        "cluster's. Empty: the preview proposes them (hostgroups linked by shared servers, native hostgroup "
        "rows, one Galera cluster or replication tree, one user's routing).",
    )
    backend_hosts = forms.CharField(
        label="Backends to confirm (a new cluster)",
        max_length=60000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "placeholder": "db1.example.net:3306, 10.0.0.5:3306"}),
        help_text="HOST:PORT of the node's backends that may receive its monitor credentials: the preview reads only "
        "these (and loopback), and after the adoption the others are not polled until an admin adds them to "
        "the cluster's credential hosts. An existing cluster's credential hosts decide for it.",
    )
    overwrite = forms.BooleanField(
        label="Overwrite intended values that differ",
        required=False,
        help_text="For an existing cluster: take this node's values where they differ from the inventory. "
        "Unchecked, the inventory is kept and the differences show as drift.",
    )

    def clean(self):
        data = super().clean()
        if not data.get("cluster") and not data.get("new_cluster_name"):
            self.add_error("new_cluster_name", "Choose an existing cluster or name a new one.")
        if data.get("cluster") and data.get("new_cluster_name"):
            self.add_error("new_cluster_name", "Either an existing cluster or a new name, not both.")
        if data.get("cluster") and data.get("backend_hosts"):
            self.add_error(
                "backend_hosts",
                f"{data['cluster']}'s credential hosts decide where its credentials go "
                "(its page, Connections): confirm backends only for a new cluster.",
            )
        return data

    def clean_backend_hosts(self):
        return parse_backend_hosts(self.cleaned_data.get("backend_hosts"))

    def clean_hostgroups(self):
        return parse_hostgroups(self.cleaned_data.get("hostgroups") or "")

    @property
    def cluster_name(self):
        data = self.cleaned_data
        return data["cluster"].name if data.get("cluster") else data["new_cluster_name"]


class TagsForm(forms.Form):
    """A cluster's tags as the operator writes them: "env=prod, region=eu-west" (apps/fleet/tags.py checks them)."""

    tags = forms.CharField(label="Tags", max_length=4000, required=False)

    def clean_tags(self):
        try:
            return tags.parse(self.cleaned_data["tags"])
        except tags.BadTag as exc:
            raise forms.ValidationError(str(exc)) from None


class ConnectionsForm(forms.ModelForm):
    """A cluster's connection settings (connections.py): the model's own validators judge each field."""

    class Meta:
        model = Cluster
        fields = ["credential_hosts", "tls_ca", "tls_verify"]
        widgets = {
            "credential_hosts": forms.Textarea(attrs={"rows": 3, "cols": 60}),
            "tls_ca": forms.Textarea(attrs={"rows": 6, "cols": 66, "placeholder": "-----BEGIN CERTIFICATE-----"}),
        }
        labels = {
            "credential_hosts": "Credential hosts",
            "tls_ca": "TLS CA (PEM)",
            "tls_verify": "Verify each server's certificate and host name against the CA",
        }

    def clean_tls_ca(self):
        return self.cleaned_data["tls_ca"].strip().replace("\r\n", "\n")


PORT_RANGE = "a port is a whole number from 1 to 65535"
# The words GET /api/v1/servers/ reads as yes and no for maintenance (Django REST framework's BooleanField, any case),
# so that one query string narrows both doors alike.
MAINTENANCE_WORDS = {
    **dict.fromkeys(["true", "t", "yes", "y", "on", "1"], True),
    **dict.fromkeys(["false", "f", "no", "n", "off", "0"], False),
}
BACKEND_FILTER_FIELDS = ("hostname", "port", "maintenance")


class BackendFilterForm(forms.Form):
    """The cluster page's backend filter: the hostname, port and maintenance of GET /api/v1/servers/ with the same
    ranges (api/serializers.py ServerFilter); the hostname is matched whole, as there."""

    hostname = forms.CharField(label="Hostname", max_length=255, required=False)  # a NUL: Django's own refusal
    port = forms.IntegerField(
        label="Port",
        min_value=1,
        max_value=65535,
        required=False,
        error_messages={"invalid": PORT_RANGE, "min_value": PORT_RANGE, "max_value": PORT_RANGE},
    )
    maintenance = forms.CharField(label="Maintenance", required=False)

    def clean_maintenance(self):
        text = self.cleaned_data["maintenance"].lower()
        if not text:
            return None
        if text not in MAINTENANCE_WORDS:
            raise forms.ValidationError("true or false (empty: any backend)")
        return MAINTENANCE_WORDS[text]


def backend_filter(query) -> tuple[ServerFilter, dict]:
    """The cluster page's backend filter read from a query string (the page and its live fragment alike): the
    arguments of fleet.selectors.servers() beside the cluster (none when a value is refused: the whole list is shown,
    with a message saying why) and the template's context (the values as typed, which the fragment's refresh carries)."""
    given = {name: query.get(name, "")[:300] for name in BACKEND_FILTER_FIELDS if query.get(name, "").strip()}
    form = BackendFilterForm(given)
    args: ServerFilter = {}
    problem = ""
    if form.is_valid():
        data = form.cleaned_data
        if data["hostname"]:
            args["hostname"] = data["hostname"]
        if data["port"] is not None:
            args["port"] = data["port"]
        if data["maintenance"] is not None:
            args["maintenance"] = data["maintenance"]
    else:
        problem = "; ".join(
            f"{form.fields[name].label} {given[name][:60]!r}: {' '.join(e.rstrip('.') for e in errors)}"
            for name, errors in form.errors.items()
        )
    return args, {
        "backend_filter": given,
        "backend_filter_query": urlencode(given),
        "backend_filter_problem": problem,
        "backend_filter_maintenance": {True: "true", False: "false"}.get(args.get("maintenance"), ""),
    }
