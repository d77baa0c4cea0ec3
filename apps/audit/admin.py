from django.contrib import admin

from .models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only, even for admins."""

    list_display = ("created_at", "actor", "action", "outcome", "cluster_name", "target")
    list_filter = ("outcome", "actor_kind")
    search_fields = ("actor", "action", "cluster_name", "target")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
