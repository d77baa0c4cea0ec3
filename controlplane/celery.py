"""The Celery app and the one beat schedule. Tasks live in workers/ and call services in apps/."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_default_queue="default",
    worker_prefetch_multiplier=1,
    task_acks_late=False,  # only idempotent tasks opt in, per task
    broker_connection_retry_on_startup=True,
    beat_schedule={},  # filled by the monitoring issue: one entry per poller, descriptive keys
)
app.autodiscover_tasks(["workers"], related_name=None, force=True)
