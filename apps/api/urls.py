"""/api/v1/: every endpoint, and a catch-all that answers JSON 404 for any other path under /api/."""

from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt

# <id:...> (controlplane/converters.py) is registered by the root URLconf before this module is read.
from . import errors
from .endpoints import adoption, alerts, audit, configuration, digests, dr, fleet, meta, operations, reports, rollouts


app_name = "api"
v1 = [
    path("me/", meta.Me.as_view(), name="me"),
    path("schema/", meta.Schema.as_view(), name="schema"),
    path("docs/", meta.Docs.as_view(), name="docs"),
    # the inventory, latest state, history, drift
    path("clusters/", fleet.ClusterList.as_view(), name="clusters"),
    path("clusters/<id:pk>/", fleet.ClusterDetail.as_view(), name="cluster"),
    path("clusters/<id:pk>/tags/", fleet.ClusterTags.as_view(), name="cluster_tags"),
    path("clusters/<id:pk>/connections/", fleet.ClusterConnections.as_view(), name="cluster_connections"),
    path("clusters/<id:pk>/native-manager/", fleet.ClusterNativeManager.as_view(), name="cluster_native_manager"),
    path("clusters/<id:pk>/hostgroups/", fleet.ClusterHostgroups.as_view(), name="cluster_hostgroups"),
    path("clusters/<id:pk>/state/", fleet.ClusterState.as_view(), name="cluster_state"),
    path("clusters/<id:pk>/drift/", fleet.ClusterDrift.as_view(), name="cluster_drift"),
    path("servers/", fleet.ServerList.as_view(), name="servers"),
    path("servers/<id:pk>/", fleet.ServerDetail.as_view(), name="server"),
    path("servers/<id:pk>/state/", fleet.ServerState.as_view(), name="server_state"),
    path("servers/<id:pk>/history/<slug:name>/", fleet.ServerHistory.as_view(), name="server_history"),
    path("adopt/preview/", adoption.AdoptPreview.as_view(), name="adopt_preview"),
    path("adopt/confirm/", adoption.AdoptConfirm.as_view(), name="adopt_confirm"),
    path("proxysql-nodes/", fleet.NodeList.as_view(), name="nodes"),
    path("proxysql-nodes/<id:pk>/", fleet.NodeDetail.as_view(), name="node"),
    path("proxysql-nodes/<id:pk>/state/", fleet.NodeState.as_view(), name="node_state"),
    path("proxysql-nodes/<id:pk>/history/<slug:name>/", fleet.NodeHistory.as_view(), name="node_history"),
    # query digests
    path("digests/", digests.DigestList.as_view(), name="digests"),
    path("digests/<id:pk>/", digests.DigestDetail.as_view(), name="digest"),
    path("digests/<id:pk>/history/", digests.DigestHistory.as_view(), name="digest_history"),
    # fleet rollouts: plan, start, follow, halt, pause, resume, abort
    path("rollouts/", rollouts.RolloutList.as_view(), name="rollouts"),
    path("rollouts/<id:pk>/", rollouts.RolloutDetail.as_view(), name="rollout"),
    path("rollouts/<id:pk>/start/", rollouts.RolloutStart.as_view(), name="rollout_start"),
    path("rollouts/<id:pk>/abort/", rollouts.RolloutAbort.as_view(), name="rollout_abort"),
    path("rollouts/<id:pk>/halt/", rollouts.RolloutHalt.as_view(), name="rollout_halt"),
    path("rollouts/<id:pk>/pause/", rollouts.RolloutPause.as_view(), name="rollout_pause"),
    path("rollouts/<id:pk>/resume/", rollouts.RolloutResume.as_view(), name="rollout_resume"),
    # operations: plan, confirm, follow, cancel
    path("operations/", operations.OperationList.as_view(), name="operations"),
    path("operations/<id:pk>/", operations.OperationDetail.as_view(), name="operation"),
    path("operations/<id:pk>/confirm/", operations.OperationConfirm.as_view(), name="operation_confirm"),
    path("operations/<id:pk>/cancel/", operations.OperationCancel.as_view(), name="operation_cancel"),
    path("operations/<id:pk>/rollback-now/", operations.OperationRollbackNow.as_view(), name="operation_rollback_now"),
    path("clusters/<id:pk>/switchover/", operations.SwitchoverPlan.as_view(), name="switchover"),
    path("clusters/<id:pk>/failover/", operations.FailoverPlan.as_view(), name="failover"),
    path("clusters/<id:pk>/repair/", operations.RepairPlan.as_view(), name="repair"),
    path("clusters/<id:pk>/record-nodes/", operations.RecordNodes.as_view(), name="record_nodes"),
    path("clusters/<id:pk>/rule-settings/", operations.RuleSettings.as_view(), name="rule_settings"),
    path("servers/<id:pk>/drain/", operations.DrainPlan.as_view(), name="drain"),
    path("servers/<id:pk>/restore/", operations.RestorePlan.as_view(), name="restore"),
    # DR channels: read them, plan a move (confirm and follow it as an operation)
    path("channels/", dr.ChannelList.as_view(), name="channels"),
    path("channels/<id:pk>/", dr.ChannelDetail.as_view(), name="channel"),
    path("channels/<id:pk>/move/", dr.ChannelMovePlan.as_view(), name="channel_move"),
    # audit log, reports
    path("audit/events/", audit.AuditEventList.as_view(), name="audit_events"),
    path("audit/events/<id:pk>/", audit.AuditEventDetail.as_view(), name="audit_event"),
    path("reports/", reports.ReportList.as_view(), name="reports"),
    path("reports/<id:pk>/", reports.ReportDetail.as_view(), name="report"),
    path("report-schedules/", reports.ReportScheduleList.as_view(), name="report_schedules"),
    path("report-schedules/<id:pk>/", reports.ReportScheduleDetail.as_view(), name="report_schedule"),
    # configuration
    path("clusters/<id:pk>/config/versions/", configuration.VersionList.as_view(), name="config_versions"),
    path("clusters/<id:pk>/config/diff/", configuration.VersionDiff.as_view(), name="config_diff"),
    path("clusters/<id:pk>/config/change-sets/", configuration.ChangeSetList.as_view(), name="change_sets"),
    path("clusters/<id:pk>/config/write-back/", configuration.WriteBack.as_view(), name="config_write_back"),
    path("config/versions/<id:pk>/", configuration.VersionDetail.as_view(), name="config_version"),
    path("config/versions/<id:pk>/export/", configuration.VersionExport.as_view(), name="config_export"),
    path("config/versions/<id:pk>/revert/", configuration.VersionRevert.as_view(), name="config_revert"),
    path("config/change-sets/<id:pk>/", configuration.ChangeSetDetail.as_view(), name="change_set"),
    path("config/change-sets/<id:pk>/plan/", configuration.ChangeSetPlan.as_view(), name="change_set_plan"),
    path("config/change-sets/<id:pk>/confirm/", configuration.ChangeSetConfirm.as_view(), name="change_set_confirm"),
    # alerts
    path("alerts/", alerts.AlertList.as_view(), name="alerts"),
    path("alerts/<id:pk>/", alerts.AlertDetail.as_view(), name="alert"),
    path("alerts/<id:pk>/acknowledge/", alerts.AlertAcknowledge.as_view(), name="alert_acknowledge"),
    path("silences/", alerts.SilenceList.as_view(), name="silences"),
    path("silences/<id:pk>/end/", alerts.SilenceEnd.as_view(), name="silence_end"),
    path("alert-channels/", alerts.AlertChannelList.as_view(), name="alert_channels"),
    path("alert-channels/<id:pk>/", alerts.AlertChannelDetail.as_view(), name="alert_channel"),
]


def _public(view):
    """The catch-all answers everyone the same JSON 404 (no login redirect, no CSRF page)."""
    view.login_required = False
    return csrf_exempt(view)


urlpatterns = [
    path("v1/", include(v1)),
    re_path(r"^.*$", _public(errors.not_found), name="not_found"),
]
