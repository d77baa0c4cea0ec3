"""Inventory edits for admins. Every save and delete writes an audit event with before and after."""

from django import forms
from django.contrib import admin
from django.db import transaction
from django.forms.models import model_to_dict

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.proxysql import SERVER_FIELDS
from apps.configuration.services import record_admin_edit, record_first_version, with_roles, with_servers

from .models import Cluster, HostgroupMembership, MirrorRule, ProxySQLNode, Server

_HIDDEN = {"admin_password", "monitor_password", "replication_password", "explain_password"}


def _snapshot(obj):
    return {k: ("(hidden)" if k in _HIDDEN else v) for k, v in model_to_dict(obj).items()}


ROLE_FIELDS = {
    "writer_hostgroup": "writer",
    "reader_hostgroup": "reader",
    "backup_writer_hostgroup": "backup_writer",
    "offline_hostgroup": "offline",
    "writer_is_also_reader": "writer_is_also_reader",
}


def _record_edit(request, cluster, change):
    """An edit of the inventory (roles, hostgroup memberships) is intent: the cluster's next configuration version
    holds it and the inventory follows, in one transaction (configuration.services.record_version), so the
    nodes' drift is shown against it and it can be written back to them."""
    record_admin_edit(cluster, change, actor=Actor.of_request(request))


def _record_servers(request, cluster, edits):
    _record_edit(request, cluster, lambda content: with_servers(content, edits))


def _row(m):
    return {f: getattr(m, f) for f in SERVER_FIELDS}


def _server_edits(before, after):
    """mysql_servers edits from the memberships as they were (rows) to what the form holds: gone rows None."""
    return {**{m.key: None for m in before}, **{m.key: _row(m) for m in after}}


class AuditedAdmin(admin.ModelAdmin):
    def save_model(self, request, obj, form, change):
        before = _snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        with transaction.atomic():
            self.write(request, obj, change)
            after = _snapshot(obj)
            changed = sorted(k for k in after if before is None or before.get(k) != after[k])
            record(
                f"{'change' if change else 'add'} {obj._meta.model_name}",
                request=request,
                cluster=_cluster_of(obj),
                target=str(obj),
                details={"before": before, "after": after, "changed_fields": changed},
            )

    def write(self, request, obj, change):
        obj.save()

    def delete_model(self, request, obj):
        before = _snapshot(obj)
        cluster, target = _cluster_of(obj), str(obj)
        with transaction.atomic():
            self.remove(request, obj)
            record(
                f"delete {obj._meta.model_name}",
                request=request,
                cluster=cluster,
                target=target,
                details={"before": before},
            )

    def remove(self, request, obj):
        obj.delete()

    def save_formset(self, request, form, formset, change):
        super().save_formset(request, form, formset, change)
        for obj in formset.new_objects:
            record(
                f"add {obj._meta.model_name}",
                request=request,
                cluster=_cluster_of(obj),
                target=str(obj),
                details={"after": _snapshot(obj)},
            )
        for obj, fields in formset.changed_objects:
            record(
                f"change {obj._meta.model_name}",
                request=request,
                cluster=_cluster_of(obj),
                target=str(obj),
                details={"after": _snapshot(obj), "changed_fields": fields},
            )
        for obj in formset.deleted_objects:
            record(
                f"delete {obj._meta.model_name}",
                request=request,
                cluster=form.instance.cluster if hasattr(form.instance, "cluster") else None,
                target=str(obj),
            )

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


def _cluster_of(obj):
    if isinstance(obj, Cluster):
        return obj
    if isinstance(obj, HostgroupMembership):
        return obj.server.cluster
    if isinstance(obj, MirrorRule):
        return obj.proxysql_node.cluster
    return getattr(obj, "cluster", None)


class SecretInput(forms.PasswordInput):
    """A password box that is never filled from the stored value; blank means keep it."""

    def __init__(self):
        super().__init__(
            render_value=False, attrs={"autocomplete": "new-password", "placeholder": "unchanged unless typed"}
        )


def _keep_blank_secret(form, field):
    value = form.cleaned_data.get(field)
    if not value and form.instance.pk:
        return getattr(type(form.instance).objects.get(pk=form.instance.pk), field)
    return value


class ClusterForm(forms.ModelForm):
    class Meta:
        model = Cluster
        exclude = ["native_hostgroups"]
        widgets = {
            "monitor_password": SecretInput(),
            "replication_password": SecretInput(),
            "explain_password": SecretInput(),
        }

    def clean_explain_password(self):
        return _keep_blank_secret(self, "explain_password")

    def clean_monitor_password(self):
        return _keep_blank_secret(self, "monitor_password")

    def clean_replication_password(self):
        return _keep_blank_secret(self, "replication_password")


class ProxySQLNodeForm(forms.ModelForm):
    class Meta:
        model = ProxySQLNode
        exclude = ["peers"]
        widgets = {"admin_password": SecretInput()}

    def clean_admin_password(self):
        return _keep_blank_secret(self, "admin_password")


class MembershipInline(admin.TabularInline):
    model = HostgroupMembership
    extra = 0


@admin.register(Cluster)
class ClusterAdmin(AuditedAdmin):
    form = ClusterForm
    list_display = (
        "name",
        "kind",
        "writer_hostgroup",
        "reader_hostgroup",
        "backup_writer_hostgroup",
        "offline_hostgroup",
    )
    search_fields = ("name",)

    def write(self, request, obj, change):
        """A new cluster is created with its roles and its version 1 (every cluster has one from its creation); a
        change writes its other fields, and its roles as the next version (the inventory follows)."""
        if not change:
            obj.save()
            record_first_version(
                obj,
                actor=Actor.of_request(request),
                source="admin",
                reason=f"cluster created in the admin by {request.user}",
            )
            return
        roles = {f: getattr(obj, f) for f in ROLE_FIELDS}
        obj.save(
            update_fields=[f.name for f in obj._meta.concrete_fields if not f.primary_key and f.name not in ROLE_FIELDS]
        )

        _record_edit(request, obj, lambda content: with_roles(content, {ROLE_FIELDS[f]: v for f, v in roles.items()}))


@admin.register(ProxySQLNode)
class ProxySQLNodeAdmin(AuditedAdmin):
    form = ProxySQLNodeForm
    list_display = ("name", "cluster", "admin_host", "admin_port", "version")
    list_filter = ("cluster",)
    readonly_fields = ("version", "adopted_at")


@admin.register(Server)
class ServerAdmin(AuditedAdmin):
    list_display = ("hostname", "port", "cluster")
    list_filter = ("cluster",)
    inlines = [MembershipInline]

    def remove(self, request, obj):
        """A backend's rows leave intent with it: the next version without them, then the server."""
        rows = list(obj.memberships.select_related("server"))
        if rows:
            _record_servers(request, obj.cluster, {m.key: None for m in rows})
        obj.delete()

    def save_formset(self, request, form, formset, change):
        if formset.model is not HostgroupMembership:
            return super().save_formset(request, form, formset, change)
        server = form.instance
        before = list(HostgroupMembership.objects.filter(server=server).select_related("server"))
        formset.save(commit=False)  # the instances only: the version writes the rows
        after = [
            f.instance for f in formset.forms if f not in formset.deleted_forms and (f.instance.pk or f.has_changed())
        ]
        with transaction.atomic():
            _record_servers(request, server.cluster, _server_edits(before, after))
            record(
                "change memberships",
                request=request,
                cluster=server.cluster,
                target=str(server),
                details={
                    "before": [_row(m) | {"hostgroup_id": m.hostgroup_id} for m in before],
                    "after": [_row(m) | {"hostgroup_id": m.hostgroup_id} for m in after],
                },
            )


@admin.register(HostgroupMembership)
class HostgroupMembershipAdmin(AuditedAdmin):
    list_display = ("hostgroup_id", "server", "status", "weight", "max_connections", "comment")
    list_filter = ("server__cluster", "hostgroup_id", "status")

    def write(self, request, obj, change):
        """The row as the next version; the inventory follows (its row then exists: the admin redirects to it)."""
        before = [HostgroupMembership.objects.select_related("server").get(pk=obj.pk)] if change else []
        _record_servers(request, obj.server.cluster, _server_edits(before, [obj]))
        saved = HostgroupMembership.objects.filter(server=obj.server, hostgroup_id=obj.hostgroup_id).first()
        obj.pk = saved.pk if saved else obj.pk

    def remove(self, request, obj):
        _record_servers(request, obj.server.cluster, {obj.key: None})


@admin.register(MirrorRule)
class MirrorRuleAdmin(admin.ModelAdmin):
    """Read-only: mirror rules are read from the nodes at adopt time."""

    list_display = ("proxysql_node", "rule_id", "active", "destination_hostgroup", "mirror_hostgroup")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
