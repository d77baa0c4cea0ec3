from django.apps import AppConfig

from apps.plans import registry


class OperationsConfig(AppConfig):
    name = "apps.operations"

    def ready(self):
        # why: models load only once the app registry is ready, which ready() is for
        from apps.digests.selectors import cluster_traffic

        from . import (
            kinds,
            locks,
            native_galera_switchover,
            native_switchover,
            pending_rows,
            services,
            shared,
            steps,
            switchover,
        )

        kinds.register()  # this app's operation kinds, one spec each (registry.py)
        steps.register()  # this app's step kinds, one handler each: the executor looks them up
        switchover.NATIVE_PLANNERS["replication"] = native_switchover.plan_native_switchover
        switchover.NATIVE_PLANNERS["galera"] = native_galera_switchover.plan_galera_switchover
        # what planners below this app ask of it and of digests (configuration's change sets: PlanningServices)
        registry.serve(
            registry.PlanningServices(
                holder=locks.current_holder,
                pending_guard=pending_rows.guard,
                annotate=shared.annotate,
                save_plan=services.save_plan,
                traffic=cluster_traffic,
            )
        )
