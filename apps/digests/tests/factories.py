"""Synthetic digest history written straight to the tables (for rollup, window and page tests)."""
from apps.digests.models import RAW, Digest, DigestPoll, DigestSource, DigestStat
from apps.fleet.models import Cluster, ProxySQLNode


def fleet(nodes=2, name="shop-cluster"):
    cluster = Cluster.objects.create(name=name, writer_hostgroup=100, reader_hostgroup=101)
    return cluster, [ProxySQLNode.objects.create(cluster=cluster, name=f"proxysql-{i + 1}", admin_host="127.0.0.1",
                                                 admin_port=46000 + i + 100 * Cluster.objects.count(),
                                                 admin_user="admin")
                     for i in range(nodes)]


def digest(text, h=None):
    return Digest.objects.get_or_create(digest=h or f"0x{abs(hash(text)) % 16**16:016X}",
                                        defaults={"digest_text": text, "first_polled_at": 0})[0]


def source(node, hostgroup=101, username="app", schemaname="shop"):
    return DigestSource.objects.get_or_create(node=node, hostgroup=hostgroup, username=username,
                                              schemaname=schemaname)[0]


def stat(src, dg, ts, count, total, most=None, least=None, resolution=RAW):
    return DigestStat.objects.create(resolution=resolution, ts=ts, source=src, digest=dg, count_star=count,
                                     sum_time=total, max_time=most, min_time=least)


def polls(node, start, end, every=30, failed=()):
    """Successful raw polls of a node every `every` s in [start, end); ts in `failed` failed."""
    DigestPoll.objects.bulk_create([
        DigestPoll(resolution=RAW, ts=ts, node=node, polls_ok=0 if ts in failed else 1,
                   polls_failed=1 if ts in failed else 0, interval_s=0 if ts in failed else every)
        for ts in range(start, end, every)])
