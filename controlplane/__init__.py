# Load the Celery app whenever Django starts, so tasks enqueued from views use our settings.
from .celery import app as celery_app

__all__ = ("celery_app",)
