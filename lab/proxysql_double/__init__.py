"""ProxySQL admin double: a LAB DOUBLE of ProxySQL 2.7.1's admin interface (port 6032).

ProxySQL cannot be installed in the lab, so this package is a MySQL-protocol server over SQLite that
answers like ProxySQL 2.7.1's admin interface for every statement the product uses (judged by the
reference transcript in shared/proxysql-reference), with stats computed from a traffic model the lab
drives. It is not ProxySQL and proxies no MySQL traffic.

    from lab.proxysql_double import ProxySQLDouble
    with ProxySQLDouble(port=0, user="admin", password="admin") as d:
        d.traffic.set_sessions(hostgroup=100, count=4, pinned_reason="auto_increment")
        ...  # connect with MySQLdb to 127.0.0.1:d.port

CLI: python -m lab.proxysql_double --port 16032 [--ports 17000-17999] ...
Over the wire: `LAB HELP` (see lab_commands).
"""

from .engine import DOUBLE_VERSION, AdminEngine
from .server import DoubleServer, ProxySQLDouble
from .traffic import PIN_REASONS, TrafficModel

__all__ = ["AdminEngine", "DoubleServer", "ProxySQLDouble", "TrafficModel", "PIN_REASONS", "DOUBLE_VERSION"]
