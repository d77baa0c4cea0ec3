"""The report's sections, one module each; apps/reports/content.py assembles them (ClusterSection.build(),
fleet_section()). Every section reads only the database and returns JSON-ready data. A cluster's sections are
plain functions over one explicit SectionContext (common.py: the period, the history read once, the inventory).

common.py       the categories (synced/desynced/out/unreachable, all/reduced/none, up/down) and the helpers
                every section shares: stretches, availability, rounding
timelines.py    the sampled timelines of backends, hostgroups, ProxySQL nodes and the service, and where an
                operation's own clock measured an interruption instead (measured.py)
availability.py the backends, hostgroups and ProxySQL tables (planned maintenance and read-pool windows)
operations.py   operations, writer changes with their interruption, read-pool actions and dry runs
traffic.py      connection errors (ConnERR) and queries, against the period before
mirror.py       mirror queue saturation
drift.py        configuration drift found and fixed (the audit log)
digests.py      top query digests and the slower or new ones
summary.py      the headline and points of a cluster
fleet.py        the fleet's table, tail and summary over the clusters' sections
(the alerts and DR channel sections are their apps' own: apps/alerts/report.py, apps/dr/report.py)
"""
