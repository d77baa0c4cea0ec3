"""The lab's real ProxySQL start (lab/real_proxysql.py): a start that crashes in ProxySQL's own start-up, as 2.7.1 can
(signal 11 in MySQL_HostGroups_Manager::commit from init_mysql_servers, sysown/proxysql#3233, met in a CI run when a
node restarted), is started again once, as its angel or systemd's Restart= would, and counted; any other failure to
start still fails."""

import stat

import pytest

from lab.bench_config import free_ports
from lab.fixtures_real_proxysql import real_binary
from lab.real_proxysql import RealProxySQL

CRASH = """Error: signal 11:
/work/shared/proxysql/2.7.1/proxysql(_ZN14ProxySQL_Admin18init_mysql_serversEv+0x4b)[0x55ced09a103b]
 ---- (_ZN14ProxySQL_Admin18init_mysql_serversEv+0x4b) : ProxySQL_Admin::init_mysql_servers()
"""


def wrapper(tmp_path, crashes_in_init):
    """A 'binary' that answers --version as the real one, crashes at its first start (in start-up, or before it with
    another error) and runs the real 2.7.1 after that."""
    marker = tmp_path / "crashed-once"
    message = CRASH if crashes_in_init else "something else went wrong\n"
    script = tmp_path / "proxysql"
    script.write_text(f"""#!/bin/sh
real={real_binary("2.7.1")}
case "$*" in *--version*) exec "$real" "$@";; esac
if [ ! -e {marker} ]; then touch {marker}; printf '%s' '{message}'; exit 139; fi
exec "$real" "$@"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_start_that_crashes_in_proxysqls_start_up_is_started_again_once_and_counted(tmp_path):
    node = RealProxySQL(wrapper(tmp_path, crashes_in_init=True), tmp_path / "n", *free_ports(2), name="p")
    try:
        version = node.start()
        assert version.startswith("2.7.1") and node.init_crashes == 1
        node.stop()
        assert node.start(fresh=False).startswith("2.7.1") and node.init_crashes == 1  # no crash this time
    finally:
        node.stop()


def test_a_start_that_fails_otherwise_still_fails(tmp_path):
    node = RealProxySQL(wrapper(tmp_path, crashes_in_init=False), tmp_path / "n", *free_ports(2), name="p")
    try:
        with pytest.raises(RuntimeError, match="did not start"):
            node.start()
        assert node.init_crashes == 0
    finally:
        node.stop()
