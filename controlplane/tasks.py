"""Queue a Celery task by its stable name (the `name=` of its @shared_task in workers/). The apps queue work
through here and never import workers/: the tasks import the apps' services, so an app importing a task
module closed an import circle (alerts, operations -> workers -> alerts, operations, dr, ...)."""

from controlplane.celery import app


def enqueue(name, args=(), **options):
    """apply_async() of the task named `name` with `args` and Celery's options (countdown, eta...). A process
    that has the task registered (a worker) goes through the task itself; one that has not (the web) sends
    the message by name. With CELERY_TASK_ALWAYS_EAGER the task modules are loaded and the task runs here."""
    if app.conf.task_always_eager and name not in app.tasks:
        app.loader.import_default_modules()
    return app.signature(name, args=tuple(args)).apply_async(**options)
