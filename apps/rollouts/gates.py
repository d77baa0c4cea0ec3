"""The health gates a wave's bake reads besides the errors and the alerts (services.gate composes them), each from
what the polls stored, each naming its figures when it fails:

- backends: a backend SHUNNED or OFFLINE on one of the wave's ProxySQL nodes since the change that was not so on
  that node just before the wave (ProxySQL shuns a backend itself, per node: each node's pool history is read);
- mirror: a node's mirror queue since the change against its limit (mysql-mirror_max_queue_length x mysql-threads,
  as monitoring/status.mirror reads it): at or above the rollout's share of it, and above the share before;
- latency: a cluster's query latency (its digests' time per query, from the stored digest deltas) since the change
  against the same window before the wave, above the rollout's ratio.

Each check takes the gate's reading (Reading) and adds its figures per node (or per cluster) and, when it fails,
a sentence and a dict naming the gate."""
import math
from dataclasses import dataclass, field

from django.db.models import Max, Sum

from apps.digests.models import RAW as DIGEST_RAW
from apps.digests.models import DigestStat
from apps.monitoring import chunks, status
from apps.monitoring.models import RAW, ProxySQLSample

DOWN = ("SHUNNED", "OFFLINE_SOFT", "OFFLINE_HARD", "SHUNNED_REPLICATION_LAG")
MIN_QUERIES = 20  # fewer queries since the change than this: no latency verdict yet (noise, not a trend)


@dataclass
class Reading:
    """One gate reading of a wave: its nodes [(pk, name, cluster name)], the windows, and what the checks found."""
    rollout: object
    nodes: list
    started: object  # the wave started (the window before ends here)
    applied: object  # the change was applied (the window since starts here)
    window: object   # timedelta: the length of the window before
    figures: dict = field(default_factory=dict)   # node name -> {figure: value}
    clusters: dict = field(default_factory=dict)  # cluster name -> {figure: value}
    bad: list = field(default_factory=list)
    failed: list = field(default_factory=list)

    def fail(self, sentence, **named):
        self.bad.append(sentence)
        self.failed.append(named)


def backends(reading):
    """Per node: backends SHUNNED or OFFLINE in any poll since the change, that were not in the last poll before
    the wave (a backend already down before is not this wave's doing)."""
    ids = {pk: name for pk, name, _ in reading.nodes}
    before, since = {}, {}
    rows = chunks.read_pool({"node_id__in": list(ids), "resolution": RAW, "ts__gte": reading.started - reading.window},
                     ["status"])
    for node_id, ts, _, key, (state,) in rows:
        if ts < reading.started:
            before[(node_id, key)] = state  # time order: the last poll before the wave wins
        elif ts >= reading.applied and state in DOWN:
            since.setdefault((node_id, key), state)
    for pk, name in ids.items():
        down = sorted((key, state) for (node, key), state in since.items()
                      if node == pk and before.get((node, key)) not in DOWN)
        reading.figures.setdefault(name, {})["backends_down"] = [
            {"hostgroup": hg, "backend": f"{host}:{port}", "status": state,
             "before": before.get((pk, (hg, host, port)))} for (hg, host, port), state in down]
        if down:
            said = ", ".join(f"{host}:{port} (hostgroup {hg}) {state} since the change, "
                             f"{before.get((pk, (hg, host, port))) or 'not polled'} before"
                             for (hg, host, port), state in down)
            reading.fail(f"the backends gate on {name}: {said}", gate="backends", node=name,
                         backends=reading.figures[name]["backends_down"])


def mirror(reading):
    """Per node: the mirror queue's highest share of its limit since the change, against the window before."""
    threshold = reading.rollout.max_mirror_queue_share
    samples = ProxySQLSample.objects.filter(resolution=RAW)
    for pk, name, _ in reading.nodes:
        mine = samples.filter(node_id=pk)
        before = _queue_share(mine.filter(ts__gte=reading.started - reading.window, ts__lt=reading.started))
        after = _queue_share(mine.filter(ts__gte=reading.applied))
        reading.figures.setdefault(name, {}).update(
            mirror_queue_before=before and before[1], mirror_queue_after=after and after[1],
            mirror_queue_limit=(after or before or (None, None, None))[2])
        if after is None or after[0] < threshold or (before is not None and after[0] <= before[0]):
            continue
        share, queue, limit = after
        was = f"{before[1]:g} ({before[0]:.0%})" if before else "not polled"
        reading.fail(f"the mirror gate on {name}: mirror queue {queue:g} of its limit {limit:g} ({share:.0%}) since "
                     f"the change, {was} before (threshold {threshold:.0%} of the limit)",
                     gate="mirror", node=name, queue=queue, limit=limit, share=share,
                     before=before and before[1], threshold=threshold)


def _queue_share(samples):
    """(share, queue, limit) of the polls' highest mirror queue against its limit, or None without figures."""
    row = samples.aggregate(queue=Max("mirror_queue_length"), per_thread=Max("mirror_max_queue_length"),
                            threads=Max("mysql_threads"))
    verdict = status.mirror({"mirror_queue_length": row["queue"], "mirror_max_queue_length": row["per_thread"],
                             "mysql_threads": row["threads"]})
    if verdict.queue_ratio is None:
        return None
    return verdict.queue_ratio, verdict.queue, verdict.queue_limit


def latency(reading):
    """Per cluster of the wave (its gated nodes only: the canary's node alone): the digests' time per query since
    the change against the window before."""
    ratio = reading.rollout.max_latency_ratio
    by_cluster = {}
    for pk, _, cluster in reading.nodes:
        by_cluster.setdefault(cluster, []).append(pk)
    start, since = _epoch(reading.started - reading.window), _epoch(reading.started)
    applied = math.ceil(reading.applied.timestamp())  # a digest poll's rows: the interval that ends at their ts
    for cluster, ids in by_cluster.items():
        stats = DigestStat.objects.filter(resolution=DIGEST_RAW, source__node_id__in=ids)
        before = _per_query_ms(stats.filter(ts__gte=start, ts__lt=since))
        after = _per_query_ms(stats.filter(ts__gt=applied))
        reading.clusters[cluster] = {"latency_ms_before": before and before[0], "latency_ms_after": after and after[0],
                                     "queries_after": after[1] if after else 0}
        if before is None or after is None or after[1] < MIN_QUERIES or after[0] <= before[0] * ratio:
            continue
        where = cluster if len(ids) > 1 else f"{cluster} ({next(n for p, n, _ in reading.nodes if p == ids[0])})"
        reading.fail(f"the latency gate on {where}: {after[0]:.2f} ms per query since the change ({after[1]} "
                     f"queries), {before[0]:.2f} ms before (threshold x{ratio:g})",
                     gate="latency", cluster=cluster, before=before[0], after=after[0], queries=after[1],
                     threshold=ratio)


def _per_query_ms(stats):
    row = stats.aggregate(count=Sum("count_star"), time=Sum("sum_time"))
    if not row["count"]:
        return None
    return row["time"] / row["count"] / 1000.0, row["count"]


def _epoch(dt):
    return int(dt.timestamp())


CHECKS = (backends, mirror, latency)
