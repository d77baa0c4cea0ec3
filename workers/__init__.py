"""Celery tasks: thin, idempotent where marked, each re-fetches by id and calls one service in apps/."""
