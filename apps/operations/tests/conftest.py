"""Helpers to read what the ProxySQL doubles hold at runtime (the adopted lab is in the root conftest)."""

from lab import demo


def runtime(double, hostgroup):
    rows = demo.admin_sql(double.port, f"SELECT hostname, port, status FROM runtime_mysql_servers WHERE hostgroup_id={hostgroup} ORDER BY port",
                          user=double.user, password=double.password)
    return [(h, int(p), s) for h, p, s in rows]


def variable(double, name):
    rows = demo.admin_sql(double.port, f"SELECT variable_value FROM runtime_global_variables WHERE variable_name='{name}'",
                          user=double.user, password=double.password)
    return rows[0][0]
