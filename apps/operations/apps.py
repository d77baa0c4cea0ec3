from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "apps.operations"

    def ready(self):
        from apps.digests.selectors import cluster_traffic
        from apps.plans import registry

        from . import kinds, locks, native_switchover, pending_rows, services, shared, steps, switchover

        kinds.register()  # this app's operation kinds, one spec each (registry.py)
        steps.register()  # this app's step kinds, one handler each: the executor looks them up
        switchover.NATIVE_PLANNERS["replication"] = native_switchover.plan_native_switchover
        # what planners below this app ask of it and of digests (configuration's change sets: PlanningServices)
        registry.serve(registry.PlanningServices(holder=locks.current_holder, pending_guard=pending_rows.guard,
                                                 annotate=shared.annotate, save_plan=services.save_plan,
                                                 traffic=cluster_traffic))
