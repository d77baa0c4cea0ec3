"""Inventory edits for admins. Every save and delete writes an audit event with before and after."""
from django import forms
from django.contrib import admin
from django.forms.models import model_to_dict

from apps.audit.services import record

from .models import Cluster, HostgroupMembership, MirrorRule, ProxySQLNode, Server

_HIDDEN = {"admin_password", "monitor_password", "replication_password"}


def _snapshot(obj):
    return {k: ("(hidden)" if k in _HIDDEN else v) for k, v in model_to_dict(obj).items()}


def _new_version(request, cluster):
    """An edit of the inventory (roles, hostgroup memberships) is intent: the cluster's configuration records it
    as its next version, so the nodes' drift is shown against it and it can be written back to them."""
    if cluster is not None and cluster.pk is not None:
        from apps.configuration.services import follow_inventory

        follow_inventory(cluster=cluster, request=request, reason=f"inventory edited in the admin by {request.user}")


class AuditedAdmin(admin.ModelAdmin):
    def save_model(self, request, obj, form, change):
        before = _snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        after = _snapshot(obj)
        changed = sorted(k for k in after if before is None or before.get(k) != after[k])
        record(f"{'change' if change else 'add'} {obj._meta.model_name}", request=request,
               cluster=_cluster_of(obj), target=str(obj),
               details={"before": before, "after": after, "changed_fields": changed})
        _new_version(request, _cluster_of(obj))

    def delete_model(self, request, obj):
        before = _snapshot(obj)
        cluster, target = _cluster_of(obj), str(obj)
        super().delete_model(request, obj)
        record(f"delete {obj._meta.model_name}", request=request, cluster=cluster, target=target,
               details={"before": before})
        _new_version(request, cluster)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        _new_version(request, _cluster_of(form.instance))  # the memberships edited inline with it

    def save_formset(self, request, form, formset, change):
        super().save_formset(request, form, formset, change)
        for obj in formset.new_objects:
            record(f"add {obj._meta.model_name}", request=request, cluster=_cluster_of(obj), target=str(obj),
                   details={"after": _snapshot(obj)})
        for obj, fields in formset.changed_objects:
            record(f"change {obj._meta.model_name}", request=request, cluster=_cluster_of(obj), target=str(obj),
                   details={"after": _snapshot(obj), "changed_fields": fields})
        for obj in formset.deleted_objects:
            record(f"delete {obj._meta.model_name}", request=request, cluster=form.instance.cluster
                   if hasattr(form.instance, "cluster") else None, target=str(obj))

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
        super().__init__(render_value=False, attrs={"autocomplete": "new-password",
                                                    "placeholder": "unchanged unless typed"})


def _keep_blank_secret(form, field):
    value = form.cleaned_data.get(field)
    if not value and form.instance.pk:
        return getattr(type(form.instance).objects.get(pk=form.instance.pk), field)
    return value


class ClusterForm(forms.ModelForm):
    class Meta:
        model = Cluster
        exclude = ["native_hostgroups"]
        widgets = {"monitor_password": SecretInput(), "replication_password": SecretInput()}

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
    list_display = ("name", "kind", "writer_hostgroup", "reader_hostgroup", "backup_writer_hostgroup",
                    "offline_hostgroup")
    search_fields = ("name",)


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


@admin.register(HostgroupMembership)
class HostgroupMembershipAdmin(AuditedAdmin):
    list_display = ("hostgroup_id", "server", "status", "weight", "max_connections", "comment")
    list_filter = ("server__cluster", "hostgroup_id", "status")


@admin.register(MirrorRule)
class MirrorRuleAdmin(admin.ModelAdmin):
    """Read-only: mirror rules are read from the nodes at adopt time."""

    list_display = ("proxysql_node", "rule_id", "active", "destination_hostgroup", "mirror_hostgroup")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
