"""The inventory, its latest state and history, and drift: the fleet pages' selectors, as JSON."""

import time
from collections import defaultdict
from dataclasses import asdict

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.response import Response

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER
from apps.audit.actor import Actor
from apps.configuration import drift
from apps.digests import selectors as digest_selectors
from apps.fleet import connections, native_setting
from apps.fleet import selectors as fleet_selectors
from apps.fleet import tags as fleet_tags
from apps.fleet.forms import ConnectionsForm
from apps.fleet.models import Cluster, ClusterTag, HostgroupMembership, ProxySQLNode, Server
from apps.monitoring import charts, selectors

from .. import serializers as s
from ..base import ApiView, body, list_schema, page_form, paged, query


# -- clusters ---------------------------------------------------------------------------------------------
class ClusterList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(
        s.ClusterSerializer, s.ClusterFilter, operation_id="clusters_list", tags=["inventory"], summary="Clusters"
    )
    def get(self, request):
        f = query(s.ClusterFilter, request)
        clusters = fleet_selectors.clusters(kind=f.get("kind") or "", name=f.get("name") or "", tag=f.get("tag"))

        def rows(page):  # the page's rows as plain values, and their tags in one query
            by_cluster = defaultdict(dict)
            for cluster_id, key, value in ClusterTag.objects.filter(cluster_id__in=[r["id"] for r in page]).values_list(
                "cluster_id", "key", "value"
            ):
                by_cluster[cluster_id][key] = value
            return [{**r, "tags": by_cluster[r["id"]]} for r in page]

        return paged(self, request, clusters.values(*s.values_of(s.ClusterSerializer, exclude=("tags",))), rows=rows)


class ClusterDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.ClusterSerializer, tags=["inventory"], summary="One cluster")
    def get(self, request, pk):
        return Response(s.ClusterSerializer(get_object_or_404(Cluster, pk=pk)).data)


class ClusterTags(ApiView):
    roles = {"put": OPERATOR}

    @extend_schema(
        request=s.TagsInput,
        responses=s.ClusterSerializer,
        tags=["inventory"],
        summary="Replace a cluster's tags (as on the cluster page; an empty object removes them all); "
        "audited with before and after, a bad tag changes nothing and says why",
    )
    def put(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        try:
            tags = fleet_tags.checked(body(s.TagsInput, request)["tags"])
        except fleet_tags.BadTag as exc:
            fleet_tags.refused(cluster, str(exc), actor=Actor.of_request(request))
            raise exceptions.ValidationError({"tags": [str(exc)]}) from None
        fleet_tags.set_tags(cluster, tags, actor=Actor.of_request(request))
        return Response(s.ClusterSerializer(Cluster.objects.get(pk=pk)).data)


class ClusterNativeManager(ApiView):
    roles = {"put": ADMIN}

    @extend_schema(
        request=s.NativeManagerInput,
        responses=s.ClusterSerializer,
        tags=["inventory"],
        summary="Set which of ProxySQL's own hostgroup managers places the cluster's servers (admins; set "
        "at adoption): drift reads Monitor's placement by it, the switchover refuses a natively "
        "managed cluster; audited with before, after and the reason, a bad value changes nothing",
    )
    def put(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        data = body(s.NativeManagerInput, request)
        try:
            value = native_setting.checked(data["native_manager"], data["reason"])
        except native_setting.BadNativeManager as exc:
            native_setting.refused(cluster, str(exc), actor=Actor.of_request(request))
            raise exceptions.ValidationError({"native_manager": [str(exc)]}) from None
        native_setting.set_native_manager(cluster, value, data["reason"], actor=Actor.of_request(request))
        return Response(s.ClusterSerializer(Cluster.objects.get(pk=pk)).data)


def _connections(cluster):
    return s.ConnectionsSerializer(
        {**connections.current(cluster), "tls_ca_described": connections.describe_ca(cluster.tls_ca)}
    ).data


class ClusterConnections(ApiView):
    roles = {"get": VIEWER, "patch": ADMIN}

    @extend_schema(
        responses=s.ConnectionsSerializer,
        tags=["inventory"],
        summary="A cluster's connection settings: credential hosts and TLS",
    )
    def get(self, request, pk):
        return Response(_connections(get_object_or_404(Cluster, pk=pk)))

    @extend_schema(
        request=s.ConnectionsInput,
        responses=s.ConnectionsSerializer,
        tags=["inventory"],
        summary="Change the fields named, as on the cluster page (admins): where the cluster's stored "
        "credentials may go, the CA and verification of every connection to its backends and "
        "ProxySQL admin ports; audited with what changed (the CA by its fingerprints)",
    )
    def patch(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        # The form takes a copy: a valid form writes its values onto its instance, and save() compares with `cluster`.
        form = page_form(
            ConnectionsForm,
            body(s.ConnectionsInput, request),
            request=request,
            instance=Cluster.objects.get(pk=pk),
            cluster=cluster,
            action=connections.ACTION,
        )
        connections.save(cluster, form.cleaned_data, actor=Actor.of_request(request))
        return Response(_connections(Cluster.objects.get(pk=pk)))


class ClusterHostgroups(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses=s.HostgroupSerializer(many=True),
        tags=["inventory"],
        summary="A cluster's hostgroups and their intended members (mysql_servers rows)",
    )
    def get(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        roles = cluster.hostgroup_roles()
        groups = {hg: {"id": hg, "role": role, "members": []} for hg, role in roles.items()}
        for m in (
            HostgroupMembership.objects.filter(server__cluster=cluster)
            .select_related("server")
            .order_by("hostgroup_id", "-weight", "server__hostname", "server__port")
        ):
            groups.setdefault(m.hostgroup_id, {"id": m.hostgroup_id, "role": "other", "members": []})["members"].append(
                m
            )
        return Response(s.HostgroupSerializer([groups[hg] for hg in sorted(groups)], many=True).data)


class ClusterState(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses=s.ClusterStateSerializer,
        tags=["state"],
        summary="Latest state of a cluster: each node's freshness, each hostgroup's rows per node, "
        "each backend's wsrep state",
    )
    def get(self, request, pk):
        live = selectors.cluster_live(get_object_or_404(Cluster, pk=pk))
        return Response(
            {
                "cluster": pk,
                "unavailable": live["unavailable"],
                "nodes": [
                    {
                        "node": v["node"].pk,
                        "name": v["node"].name,
                        "state": v["state"],
                        "age_s": v["age"],
                        "error": v["error"],
                    }
                    for v in live["node_views"]
                ],
                "hostgroups": [
                    {
                        "id": g["id"],
                        "role": g["role"],
                        "servers": [
                            {
                                "host": row["host"],
                                "port": row["port"],
                                "server": row["server"].pk if row["server"] else None,
                                "intended_status": row["intended"].status if row["intended"] else None,
                                "nodes": [_per_node(r) for r in row["rows"]],
                            }
                            for row in g["servers"]
                        ],
                    }
                    for g in live["live_hostgroups"]
                ],
                "backends": [_backend_row(b) for b in live["backends"]],
            }
        )


def _per_node(row):
    """One server's row on one ProxySQL node (pool and runtime), with the node as its id."""
    return {
        **{k: v for k, v in row.items() if k not in ("node", "age", "figures_age")},
        "node": row["node"].pk,
        "age_s": row["age"],
    }


def _backend_row(b):
    return {
        "server": b["server"].pk,
        "host": b["server"].hostname,
        "port": b["server"].port,
        "state": b["state"],
        "age_s": b["age"],
        "label": b["label"],
        "wsrep": b["wsrep"],
        "problems": _problems(b["problems"]),
        "error": b["error"],
        "error_since": b["error_since"],
        "lag_seconds": b["lag_seconds"],
    }


def _problems(problems):
    return [{"colour": colour, "what": what, "text": text} for colour, what, text in problems]


class ClusterDrift(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        tags=["state"],
        responses=OpenApiTypes.OBJECT,
        summary="Drift, read live from every ProxySQL node: its memory, runtime and disk against the "
        "current configuration version, table by table (servers, hostgroups, users, query rules, "
        "scheduler, variables), and what each difference means (what a restart would load, what "
        "runs unsaved, what a LOAD would apply)",
    )
    def get(self, request, pk):
        result = drift.cluster_drift(get_object_or_404(Cluster, pk=pk))
        return Response(
            {
                "version": result.version,
                "in_sync": result.in_sync,
                "nodes": [
                    {
                        "node": n.node_id,
                        "name": n.node_name,
                        "in_sync": n.in_sync,
                        "error": n.error,
                        "error_kind": n.error_kind,
                        "layers": [asdict(d) for d in n.layers],
                        "findings": [asdict(f) for f in n.findings],
                    }
                    for n in result.nodes
                ],
            }
        )


# -- servers (backends) -----------------------------------------------------------------------------------
class ServerList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(
        s.ServerSerializer, s.ServerFilter, operation_id="servers_list", tags=["inventory"], summary="Backend servers"
    )
    def get(self, request):
        f = query(s.ServerFilter, request)
        servers = fleet_selectors.servers(
            cluster=f.get("cluster"),
            hostname=f.get("hostname") or "",
            port=f.get("port"),
            maintenance=f.get("maintenance"),
        )
        return paged(
            self, request, servers.values(*s.values_of(s.ServerSerializer, ["memberships"])), rows=with_memberships
        )


def with_memberships(servers):
    """Each server's memberships in one query for the page (a prefetch builds a queryset per server)."""
    servers = list(servers)
    fields = s.values_of(s.MembershipSerializer)
    per_server = {row["id"]: [] for row in servers}
    for m in (
        HostgroupMembership.objects.filter(server_id__in=per_server)
        .order_by("hostgroup_id")
        .values("server_id", *fields)
    ):
        per_server[m.pop("server_id")].append(m)
    return [{**row, "memberships": per_server[row["id"]]} for row in servers]


class ServerDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.ServerSerializer, tags=["inventory"], summary="One backend server")
    def get(self, request, pk):
        return Response(
            s.ServerSerializer(get_object_or_404(Server.objects.prefetch_related("memberships"), pk=pk)).data
        )


def _live(out, key, obj):
    return {
        key: obj.pk,
        "unavailable": out["unavailable"],
        "state": out["state"],
        "age_s": out["age"],
        "error": out["error"],
        "error_kind": out["error_kind"],
        "error_since": out["error_since"],
        "last_ok": out["last_ok"],
        "from_history": out["from_history"],
    }


class ServerState(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses=s.BackendStateSerializer,
        tags=["state"],
        summary="Latest state of a backend (wsrep, read_only, lag) from its last poll",
    )
    def get(self, request, pk):
        server = get_object_or_404(Server.objects.select_related("cluster"), pk=pk)
        out = selectors.backend_live(server)
        return Response(
            {
                **_live(out, "server", server),
                "label": out["label"],
                "wsrep": out["wsrep"],
                "lag_seconds": out["lag_seconds"],
                "problems": _problems(out["problems"]),
            }
        )


# -- ProxySQL nodes ---------------------------------------------------------------------------------------
class NodeList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(
        s.ProxySQLNodeSerializer,
        s.InventoryFilter,
        operation_id="proxysql_nodes_list",
        tags=["inventory"],
        summary="ProxySQL nodes",
    )
    def get(self, request):
        f = query(s.InventoryFilter, request)
        nodes = fleet_selectors.proxysql_nodes(cluster=f.get("cluster"))
        return paged(
            self,
            request,
            nodes.values(*s.values_of(s.ProxySQLNodeSerializer, exclude=("clusters_served",))),
            rows=s.ProxySQLNodeSerializer.rows,
        )


class NodeDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.ProxySQLNodeSerializer, tags=["inventory"], summary="One ProxySQL node")
    def get(self, request, pk):
        return Response(s.ProxySQLNodeSerializer(get_object_or_404(ProxySQLNode, pk=pk)).data)


class NodeState(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses=s.NodeStateSerializer,
        tags=["state"],
        summary="Latest state of a ProxySQL node: global figures, connection pool, mirror panel",
    )
    def get(self, request, pk):
        node = get_object_or_404(ProxySQLNode.objects.select_related("cluster"), pk=pk)
        now = time.time()
        out = {**selectors.proxysql_live(node, now), **digest_selectors.mirror_rules(node, now)}
        mirror = out["mirror"]
        return Response(
            {
                **_live(out, "node", node),
                "figures": out["figures"],
                "pool": out["pool"],
                "mirror": {**asdict(mirror), "queue_ratio": mirror.queue_ratio, "saturated": mirror.saturated},
                "mirror_rules": [
                    {
                        "rule_id": r["rule"].rule_id,
                        "active": r["rule"].active,
                        "match": r["match"],
                        "mirror_hostgroup": r["rule"].mirror_hostgroup,
                        "note": r["note"],
                        "window_end": r.get("window_end"),
                        "interval_s": r.get("interval_s"),
                        "hits": r.get("hits"),
                        "expected": r.get("expected"),
                        "mirrored": r.get("mirrored"),
                        "dropped": r.get("dropped"),
                        "loss": r.get("loss"),
                        "prepared_share": r.get("prepared_share"),
                    }
                    for r in out["mirror_rules"]
                ],
            }
        )


# -- history ----------------------------------------------------------------------------------------------
def _history(request, kind, obj, name):
    f = query(s.HistoryFilter, request)
    try:
        return Response(charts.chart(kind, name, obj, f["range"], resolution=charts.RESOLUTIONS[f["resolution"]]))
    except charts.UnknownChart:
        names = charts.PROXYSQL_CHARTS if kind == "proxysql" else charts.BACKEND_CHARTS
        raise Http404(f"No chart named {name[:60]!r}; the charts are {', '.join(names)}.") from None


class NodeHistory(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        parameters=[
            s.HistoryFilter,
            OpenApiParameter("name", str, OpenApiParameter.PATH, enum=list(charts.PROXYSQL_CHARTS)),
        ],
        responses=s.HistorySerializer,
        tags=["history"],
        summary="History of a ProxySQL node: one chart's series (null values are gaps)",
    )
    def get(self, request, pk, name):
        return _history(
            request, "proxysql", get_object_or_404(ProxySQLNode.objects.select_related("cluster"), pk=pk), name
        )


class ServerHistory(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        parameters=[
            s.HistoryFilter,
            OpenApiParameter("name", str, OpenApiParameter.PATH, enum=list(charts.BACKEND_CHARTS)),
        ],
        responses=s.HistorySerializer,
        tags=["history"],
        summary="History of a backend: one chart's series (null values are gaps)",
    )
    def get(self, request, pk, name):
        return _history(request, "backend", get_object_or_404(Server.objects.select_related("cluster"), pk=pk), name)
