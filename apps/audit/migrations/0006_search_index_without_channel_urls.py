"""The search index of the events that recorded an alert channel's full URL (before alerts 0003) rebuilt from their
details as shown (apps/audit/redaction.py): a viewer's search (a LIKE over search_text, prefixes over the tokens) must
not find such an event by a piece of the URL, or guess the URL piece by piece. The events themselves (hashed) are not
touched; the index is derived, not evidence (apps/audit/models.py)."""

from django.db import migrations

from apps.audit import search
from apps.audit.redaction import URL_ACTIONS


def rebuild(apps, schema_editor):
    AuditEvent = apps.get_model("audit", "AuditEvent")
    AuditSearchToken = apps.get_model("audit", "AuditSearchToken")
    for event in AuditEvent.objects.filter(action__in=URL_ACTIONS).iterator():
        text = search.search_text(
            action=event.action,
            actor=event.actor,
            cluster_name=event.cluster_name,
            target=event.target,
            outcome=event.outcome,
            source_address=event.source_address,
            details=event.details,
        )
        if text == event.search_text:
            continue
        AuditEvent._base_manager.filter(pk=event.pk).update(search_text=text)  # the index, not the hashed fields
        AuditSearchToken.objects.filter(event_id=event.pk).delete()
        AuditSearchToken.objects.bulk_create(
            [AuditSearchToken(token=t, event_id=event.pk) for t in search.tokens_for(text)]
        )


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0005_actor_doors"),
    ]

    operations = [
        migrations.RunPython(rebuild, migrations.RunPython.noop),
    ]
