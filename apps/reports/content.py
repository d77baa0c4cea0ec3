"""What a report says, as data: one section per cluster (availability, writer changes, read-pool actions,
connection errors, query digests, mirror saturation, drift, ProxySQL reachability), a fleet section, and
the summary a manager reads first. Reads only the database; everything returned is JSON. This module assembles
them (ClusterSection.build(), fleet_section()); each section is a module of apps/reports/sections/.

Definitions (also printed in the report's notes):
- a backend is *Synced* (or up, off Galera), *Desynced* (wsrep state 2: still serving reads), *out*
  (reachable but not serving: Joining/Joined, not Primary, not ready, or not ONLINE in any writer/reader
  hostgroup on any ProxySQL node) or *unreachable* (the poll failed). Its availability is Synced + Desynced
  over the time observed.
- a hostgroup has *all* its servers ONLINE and usable, a *reduced* set, or *none* on at least one
  reachable ProxySQL node. "None" in the writer hostgroup is a writer interruption.
- the cluster's service is *available* while at least one ProxySQL node answers and neither the writer
  nor the reader hostgroup has none on any reachable node.
- those figures are sampled by the polls (a poll that saw a hostgroup empty counts until the next poll),
  except where an operation measured the interruption itself: a sampled stretch inside an operation's
  window counts that window instead (measured.py), and the report says which is which.
"""

from django.db.models import Prefetch

from apps.alerts import report as alerts_report
from apps.audit.models import AuditEvent
from apps.dr import report as dr_report
from apps.operations.models import Operation, OperationStep
from apps.rollouts import report as rollouts_report

from . import history, measured
from . import timeline as tl
from .history import as_dt
from .sections import availability, drift, fleet, mirror, operations, timelines, traffic
from .sections.common import (
    BACKEND_CATS,
    DOWN,
    UP,
    SectionContext,
    _avail,
    _down,
    _held,
    _json_timeline,
    _none,
    _stretch_list,
    _top_stretches,
)
from .sections.digests import digest_section
from .sections.summary import cluster_summary

__all__ = ["BACKEND_CATS", "FLEET_TABLE_ROWS", "LAB_MARK", "ClusterSection", "fleet_section"]

LAB_MARK = "lab history generated"  # audit action written by manage.py lab_report_history
# Clusters listed in the fleet report's table (and read again at the finest resolution when the fleet is bigger); the others
# are summarised in one line. At 500 clusters, each listed cluster costs about 2 s of the build (a week
# of 1-minute rows), the others 0.05 s each (docs/benchmarks.md, "Weekly fleet report at scale").
FLEET_TABLE_ROWS = fleet.FLEET_DETAILED


class ClusterSection:
    """Builds the section of one cluster for [start, end) (epoch seconds), with `prev` the period before: reads what
    every section needs once (SectionContext) and calls each section's functions with it. `rollouts`: the
    rollouts' sections of every cluster of the report, read at once (rollouts/report.py sections()); else read here."""

    def __init__(
        self,
        cluster,
        start,
        end,
        prev_start,
        prev_end,
        bucket_s,
        before_words="the period before",
        hourly_only=False,
        rollouts=None,
    ):
        self.rollouts = rollouts
        servers = {s.pk: s for s in cluster.servers.all()}
        nodes = {n.pk: n for n in cluster.proxysql_nodes.all()}
        # A ProxySQL that serves other clusters too: its queries and mirror figures are node-wide (the pool's
        # connection errors are this cluster's hostgroups only: the poller scopes them).
        also_serves = {pk: [o.cluster.name for o in n.shares_with()] for pk, n in nodes.items()}
        self.ctx = SectionContext(
            cluster=cluster,
            start=start,
            end=end,
            prev_start=prev_start,
            prev_end=prev_end,
            bucket_s=bucket_s,
            before_words=before_words,
            hourly_only=hourly_only,
            h=history.load(cluster, start, end, hourly_only),
            servers=servers,
            by_endpoint={(s.hostname, s.port): s.pk for s in servers.values()},
            nodes=nodes,
            also_serves=also_serves,
            shared_with=sorted({name for names in also_serves.values() for name in names}),
            roles=cluster.hostgroup_roles(),
        )

    # -- the section ----------------------------------------------------------------------------------
    def build(self):
        ctx = self.ctx
        c = ctx.cluster
        period_s = ctx.end - ctx.start
        ctx.found = timelines.measured_windows(ctx)
        backends_tl = timelines.backend_timelines(ctx)
        sampled_hostgroups_tl = timelines.hostgroup_timelines(ctx)
        hostgroups_tl = {hg: timelines.measured_only(ctx, t, _none) for hg, t in sampled_hostgroups_tl.items()}
        proxysql_tl = timelines.proxysql_timelines(ctx)
        service_tl = timelines.measured_only(
            ctx, timelines.service_timeline(ctx, sampled_hostgroups_tl, proxysql_tl), _held
        )
        observed = tl.covered(service_tl)
        sd = tl.durations(service_tl, key=lambda v: v[0])
        down_stretches, more = _top_stretches(
            timelines.sourced(ctx, _stretch_list(service_tl, _down, lambda v: v[1]), service_tl, _down)
        )
        measured_s, sampled_s, measured_ops = measured.split(
            [seg for seg in service_tl if _down(seg[2])], ctx.start, ctx.end
        )
        section = {
            "id": c.pk,
            "name": c.name,
            "kind": c.get_kind_display(),
            "url": c.get_absolute_url(),
            "writer_hostgroup": c.writer_hostgroup,
            "reader_hostgroup": c.reader_hostgroup,
            "coverage": {
                "period_s": period_s,
                "observed_s": round(observed, 3),
                "hourly_only": ctx.hourly_only,
                "resolutions": {
                    history.RESOLUTION_NAMES[r]: round(s, 1)
                    for r, s in sorted(history.resolutions_used(ctx.h.backend_pieces).items())
                },
                "interval_s": ctx.h.interval,
            },
            "service": {
                "availability": _avail(sd, [UP], observed),
                "down_s": round(sd.get(DOWN, 0.0), 3),
                "measured_s": round(measured_s, 3),
                "sampled_s": round(sampled_s, 3),
                "measured_ops": len(measured_ops),
                "interval_s": ctx.h.interval,
                "stretches": down_stretches,
                "more_stretches": more,
                "timeline": _json_timeline(service_tl, key=lambda v: v[0]),
            },
        }
        ops = list(
            Operation.objects.filter(cluster=c, started_at__gte=as_dt(ctx.start), started_at__lt=as_dt(ctx.end))
            .prefetch_related(Prefetch("steps", queryset=OperationStep.objects.order_by("index")))
            .order_by("started_at")
        )
        ctx.windows = availability.windows(ops, ctx.start, ctx.end)
        section["backends"] = availability.backends(ctx, backends_tl)
        section["hostgroups"] = availability.hostgroups(ctx, hostgroups_tl)
        section["proxysql"] = availability.proxysql(ctx, proxysql_tl)
        section["operations"] = [operations.operation(ctx, op) for op in ops]
        section["writer_changes"] = operations.writer_changes(ctx, ops, backends_tl, sampled_hostgroups_tl)
        section["manager_moves"] = operations.manager_moves(ctx)
        section["read_pool"] = operations.read_pool(ctx, ops)
        section["conn_err"], section["traffic"] = traffic.conn_err_and_traffic(ctx)
        section["mirror"] = mirror.mirror(ctx)
        section["drift"] = drift.drift(ctx)
        section["digests"] = digest_section(ctx.start, ctx.end, ctx.prev_start, ctx.prev_end, cluster_id=c.pk)
        section["alerts"] = alerts_report.section(c.pk, ctx.start, ctx.end)
        section["dr_channels"] = dr_report.section(c.pk, ctx.start, ctx.end)
        section["rollouts"] = (
            self.rollouts if self.rollouts is not None else rollouts_report.sections([c.pk], ctx.start, ctx.end)
        )[c.pk]
        section["lab_data"] = _lab_marked(c.pk, ctx.start, ctx.end)
        section["summary"] = cluster_summary(section, before=ctx.before_words)
        return section


def _lab_marked(cluster_id, start, end):
    """Lab history (manage.py lab_report_history) covering part of the period: the report must say so."""
    for e in AuditEvent.objects.filter(cluster_id=cluster_id, action=LAB_MARK).only("details")[:50]:
        d = e.details or {}
        if d.get("start", 0) < end and d.get("end", 0) > start:
            return True
    return False


def fleet_section(sections, start, end, prev_start, prev_end, before="the period before", digests=True):
    """The fleet's section (sections/fleet.py), FLEET_TABLE_ROWS clusters listed in its table."""
    return fleet.section(sections, start, end, prev_start, prev_end, before, digests, table_rows=FLEET_TABLE_ROWS)
