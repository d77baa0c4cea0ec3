"""The disaster-recovery lab on real servers: two Galera clusters with their own GTID domains and the
asynchronous channel from dc1 into dc2."""

from __future__ import annotations

import time
from contextlib import closing


from lab.dr import WriteLoad, compare, gtid_map, read_side


def variables(site, n, *names):
    with closing(site.root_connection(n)) as conn:
        cur = conn.cursor()
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (%s)" % ",".join(["%s"] * len(names)), names)
        return dict(cur.fetchall())


def test_each_cluster_has_its_gtid_domain_and_binary_logs(dr_lab):
    for site, domain in ((dr_lab.dc1, 1), (dr_lab.dc2, 2)):
        for node in site.nodes:
            v = variables(
                site,
                node.n,
                "wsrep_gtid_mode",
                "wsrep_gtid_domain_id",
                "gtid_domain_id",
                "log_bin",
                "log_slave_updates",
                "server_id",
            )
            assert v == {
                "wsrep_gtid_mode": "ON",
                "wsrep_gtid_domain_id": str(domain),
                "gtid_domain_id": str(domain * 10 + node.n),
                "log_bin": "ON",
                "log_slave_updates": "ON",
                "server_id": str(domain * 10 + node.n),
            }, (site.cluster_name, node.n)


def test_the_channel_replicates_the_write_load_exactly(dr_lab):
    before = read_side(dr_lab.dc2)
    with WriteLoad(dr_lab) as load:
        time.sleep(2)
    assert load.committed > 20, load.errors
    assert load.uncertain == 0 and not load.errors
    result = compare(dr_lab)
    assert result.identical, result.line()
    assert result.dc2.rows >= (before.rows or 0) + load.committed
    # Galera carries domain 1's GTIDs unchanged to every dc2 node, so any of them can take the channel over.
    for node in dr_lab.dc2.nodes:
        pos = variables(dr_lab.dc2, node.n, "gtid_binlog_pos")["gtid_binlog_pos"]
        assert gtid_map(pos)[1] == gtid_map(result.dc1.gtid_binlog_pos)[1], node.n
