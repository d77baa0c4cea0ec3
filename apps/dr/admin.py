"""Channels in the inventory admin (admins only), audited like every inventory edit."""

from django import forms
from django.contrib import admin

from apps.fleet.admin import AuditedAdmin, SecretInput, _keep_blank_secret

from .models import ChannelCandidate, ReplicationChannel


class ReplicationChannelForm(forms.ModelForm):
    class Meta:
        model = ReplicationChannel
        fields = "__all__"
        widgets = {"replication_password": SecretInput()}

    def clean_replication_password(self):
        return _keep_blank_secret(self, "replication_password")


class CandidateInline(admin.TabularInline):
    model = ChannelCandidate
    extra = 1


@admin.register(ReplicationChannel)
class ReplicationChannelAdmin(AuditedAdmin):
    form = ReplicationChannelForm
    list_display = (
        "name",
        "source_cluster",
        "source_server",
        "replica_cluster",
        "replica_server",
        "auto_failover_enabled",
    )
    inlines = [CandidateInline]
