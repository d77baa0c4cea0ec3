"""Alert channel URLs encrypted at rest (a Slack-style URL is a credential), and the delivery log's stored errors
cleaned of what they quoted: the URL's path (requests' exception texts) and what the receiver answered.
The audit log is not rewritten (hash-chained, append-only): events before this migration keep the URLs they
recorded."""

import re

import apps.fleet.secrets
from django.db import migrations

ANSWER = re.compile(r"^(HTTP \d{3}):.*$", re.S)


def _clean(text, secrets):
    text = ANSWER.sub(r"\1", text)
    for secret in secrets:
        text = text.replace(secret, "…")
    return text


def encrypt_and_clean(apps, schema_editor):
    Channel = apps.get_model("alerts", "Channel")
    Notification = apps.get_model("alerts", "Notification")
    DeliveryAttempt = apps.get_model("alerts", "DeliveryAttempt")
    for channel in Channel.objects.exclude(url=""):
        Channel.objects.filter(pk=channel.pk).update(url=channel.url)  # the field encrypts what it writes
        path = re.sub(r"^[a-z]+://[^/]*", "", channel.url)
        secrets = sorted({s for s in (channel.url, path, path.split("?")[0]) if len(s) > 1}, key=len, reverse=True)
        for model, field, rows in (
            (Notification, "last_error", Notification.objects.filter(channel=channel)),
            (DeliveryAttempt, "error", DeliveryAttempt.objects.filter(notification__channel=channel)),
        ):
            for pk, text in rows.exclude(**{field: ""}).values_list("pk", field).iterator():
                cleaned = _clean(text, secrets)
                if cleaned != text:
                    model.objects.filter(pk=pk).update(**{field: cleaned})


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0002_alert_state_since"),
    ]

    operations = [
        migrations.AlterField(
            model_name="channel",
            name="url",
            field=apps.fleet.secrets.EncryptedTextField(
                blank=True,
                help_text="webhook URL; PagerDuty: the Events API v2 enqueue URL; Alertmanager: its base URL",
            ),
        ),
        migrations.RunPython(encrypt_and_clean, migrations.RunPython.noop),
    ]
