"""Synthetic digest history written straight to the tables (for rollup, window and page tests)."""

from apps.digests.models import RAW, Digest, DigestPoll, DigestSource, DigestStat
from apps.fleet.models import Cluster, ProxySQLNode


def fleet(nodes=2, name="shop-cluster"):
    cluster = Cluster.objects.create(name=name, writer_hostgroup=100, reader_hostgroup=101)
    return cluster, [
        ProxySQLNode.objects.create(
            cluster=cluster,
            name=f"proxysql-{i + 1}",
            admin_host="127.0.0.1",
            admin_port=46000 + i + 100 * Cluster.objects.count(),
            admin_user="admin",
        )
        for i in range(nodes)
    ]


def digest(text, h=None):
    return Digest.objects.get_or_create(
        digest=h or f"0x{abs(hash(text)) % 16**16:016X}", defaults={"digest_text": text, "first_polled_at": 0}
    )[0]


def source(node, hostgroup=101, username="app", schemaname="shop"):
    return DigestSource.objects.get_or_create(node=node, hostgroup=hostgroup, username=username, schemaname=schemaname)[
        0
    ]


def stat(src, dg, ts, count, total, most=None, least=None, resolution=RAW):
    return DigestStat.objects.create(
        resolution=resolution,
        ts=ts,
        source=src,
        digest=dg,
        count_star=count,
        sum_time=total,
        max_time=most,
        min_time=least,
    )


def polls(node, start, end, every=30, failed=()):
    """Successful raw polls of a node every `every` s in [start, end); ts in `failed` failed."""
    DigestPoll.objects.bulk_create(
        [
            DigestPoll(
                resolution=RAW,
                ts=ts,
                node=node,
                polls_ok=0 if ts in failed else 1,
                polls_failed=1 if ts in failed else 0,
                interval_s=0 if ts in failed else every,
            )
            for ts in range(start, end, every)
        ]
    )


def mark_copies():
    """Mark the stored rows that are mirrored copies as the digest poll does when it stores them
    (mirroring.mark_copies, from the nodes' MirrorRule rows: the rules the polls read), their polls' copy_rows too."""
    from types import SimpleNamespace

    from django.db.models import F

    from apps.digests.mirroring import mark_copies as poll_marks
    from apps.fleet.models import MirrorRule

    rules = {}
    for rule in MirrorRule.objects.order_by("rule_id"):
        rules.setdefault(rule.proxysql_node_id, []).append(
            {
                "rule_id": rule.rule_id,
                "active": rule.active,
                "match_digest": rule.match_digest,
                "match_pattern": rule.match_pattern,
                "mirror_hostgroup": rule.mirror_hostgroup,
            }
        )
    for node_id, node_rules in rules.items():
        rows = list(DigestStat.objects.filter(source__node_id=node_id).select_related("source", "digest"))
        deltas = [
            SimpleNamespace(
                hostgroup=r.source.hostgroup,
                schemaname=r.source.schemaname,
                username=r.source.username,
                digest=r.digest.digest,
            )
            for r in rows
        ]
        for row, copies in zip(rows, poll_marks(node_rules, deltas, {})):
            if copies is False:
                continue
            DigestStat.objects.filter(
                resolution=row.resolution, ts=row.ts, source_id=row.source_id, digest_id=row.digest_id
            ).update(mirrored=copies)
            DigestPoll.objects.filter(resolution=row.resolution, ts=row.ts, node_id=node_id).update(
                copy_rows=F("copy_rows") + 1
            )
