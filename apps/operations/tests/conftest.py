"""Helpers to read what the ProxySQL doubles hold at runtime (the adopted lab is in the root conftest)."""
from apps.fleet.models import HostgroupMembership

from lab import demo


def runtime(double, hostgroup):
    rows = demo.admin_sql(double.port, f"SELECT hostname, port, status FROM runtime_mysql_servers WHERE hostgroup_id={hostgroup} ORDER BY port",
                          user=double.user, password=double.password)
    return [(h, int(p), s) for h, p, s in rows]


def variable(double, name):
    rows = demo.admin_sql(double.port, f"SELECT variable_value FROM runtime_global_variables WHERE variable_name='{name}'",
                          user=double.user, password=double.password)
    return rows[0][0]


def layout(double):
    """Every runtime mysql_servers row of one double with the columns that say who is who; the configured
    status (a SHUNNED row is ProxySQL's own verdict on a dead backend, configured ONLINE)."""
    rows = demo.admin_sql(double.port, "SELECT hostgroup_id, hostname, port, status, weight, max_connections, comment "
                                       "FROM runtime_mysql_servers", user=double.user, password=double.password)
    return sorted((hg, host, port, "ONLINE" if status == "SHUNNED" else status, *rest)
                  for hg, host, port, status, *rest in rows)


def inventory_layout(cluster):
    return sorted((m.hostgroup_id, m.server.port, m.status, m.weight, m.max_connections, m.comment)
                  for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server"))


def mirrored(rows, a, b, port_at):
    """The same rows with servers a and b exchanged (the port is column `port_at`)."""
    swap = {str(a): str(b), str(b): str(a), a: b, b: a}
    return sorted(tuple(swap.get(v, v) if i == port_at else v for i, v in enumerate(row)) for row in rows)
