from django.apps import AppConfig


class LabConfig(AppConfig):
    """The lab as a Django app, for its management commands only (manage.py bench_operations, bench_api,
    bench_audit, bench_digests, lab_report_history). Installed in development mode only
    (controlplane/settings.py): the product's apps import nothing from lab/, and production never loads it."""

    name = "lab"
    verbose_name = "Lab (development only)"
