"""Issue 35 item 3: intent in one record. Every cluster has a configuration version, and the variables operations
change for a while (MANAGED below) live in it, not on its nodes. What the old fallbacks read becomes a version:
- a cluster without one gets version 1 made of the inventory (its roles and mysql_servers rows) and the values its
  nodes recorded at adoption (ProxySQLNode.intended_variables, the first node that has one);
- a cluster whose latest version lacks a value its nodes recorded gets the next version with it.
Each version audited as any ("configuration version recorded", by the system, source "migration"). The node's
disk layer, the last fallback, cannot be read here: a cluster whose nodes recorded nothing gets a version without
the variable, and repair says to record the nodes (manage.py record_nodes)."""

from django.db import migrations

# Frozen here: what the code said when this migration was written (the code may change, this must not).
MANAGED = ("mysql-auto_increment_delay_multiplex",)
SERVER_FIELDS = (
    "gtid_port",
    "status",
    "weight",
    "compression",
    "max_connections",
    "max_replication_lag",
    "use_ssl",
    "max_latency_ms",
    "comment",
)
REASON = "intent in one record (issue 35): what the inventory and the nodes' recorded variables held"


def recorded_variables(nodes):
    """{name: value} of MANAGED from the nodes' values recorded at adoption (the first node, by pk, that has one)."""
    out = {}
    for node in nodes.order_by("pk"):
        for name in MANAGED:
            value = (node.intended_variables or {}).get(name)
            if name not in out and value is not None:
                out[name] = str(value)
    return out


def first_content(cluster, memberships, variables):
    from apps.configuration import content as C  # why: a migration (pure helpers: the tables' order and claims)

    content = C.empty()
    content["roles"] = {
        "writer": cluster.writer_hostgroup,
        "reader": cluster.reader_hostgroup,
        "backup_writer": cluster.backup_writer_hostgroup,
        "offline": cluster.offline_hostgroup,
        "writer_is_also_reader": cluster.writer_is_also_reader,
    }
    content["mysql_servers"] = [
        {
            "hostgroup_id": m.hostgroup_id,
            "hostname": m.server.hostname,
            "port": m.server.port,
            **{f: getattr(m, f) for f in SERVER_FIELDS},
        }
        for m in memberships.filter(server__cluster=cluster).select_related("server")
    ]
    content["global_variables"] = dict(variables)
    content["hostgroups"] = sorted(C.claimed_hostgroups(content))
    return C.sort(content)


def every_cluster_a_version(apps, schema_editor):
    from apps.audit.actor import Actor  # why: a migration (the audit row is written as every version's is)
    from apps.audit.services import record  # why: a migration (as above)

    Cluster = apps.get_model("fleet", "Cluster")
    ProxySQLNode = apps.get_model("fleet", "ProxySQLNode")
    HostgroupMembership = apps.get_model("fleet", "HostgroupMembership")
    ConfigVersion = apps.get_model("configuration", "ConfigVersion")
    for cluster in Cluster.objects.order_by("pk"):
        variables = recorded_variables(ProxySQLNode.objects.filter(cluster=cluster))
        parent = ConfigVersion.objects.filter(cluster=cluster).order_by("-number").first()
        if parent is None:
            content = first_content(cluster, HostgroupMembership.objects, variables)
        else:
            held = parent.content.get("global_variables") or {}
            missing = {k: v for k, v in variables.items() if k not in held}
            if not missing:
                continue
            content = {**parent.content, "global_variables": dict(sorted({**held, **missing}.items()))}
        version = ConfigVersion.objects.create(
            cluster=cluster,
            number=parent.number + 1 if parent else 1,
            parent=parent,
            author="system",
            reason=REASON,
            content=content,
            source="migration",
        )
        record(
            "configuration version recorded",
            actor=Actor.system(),
            cluster=cluster,
            target=f"{cluster.name} v{version.number}",
            details={
                "version": version.number,
                "parent": parent.number if parent else None,
                "source": "migration",
                "reason": REASON,
                "operation": None,
                "changes": None,
            },
        )


class Migration(migrations.Migration):
    dependencies = [
        ("configuration", "0001_initial"),
        ("fleet", "0016_cluster_tls_ca_and_verify"),
        ("audit", "0006_search_index_without_channel_urls"),
    ]

    operations = [
        migrations.RunPython(every_cluster_a_version, migrations.RunPython.noop),
    ]
