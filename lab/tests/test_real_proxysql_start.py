"""The lab's real ProxySQL start (lab/real_proxysql.py): a start that crashes in ProxySQL's own start-up, as 2.7.1 can
(signal 11 in MySQL_HostGroups_Manager::commit from init_mysql_servers, sysown/proxysql#3233, met in a CI run when a
node restarted, and for real twice in a row in another), is started again, up to three times, as its angel or
systemd's Restart= would, each crash counted; any other failure to start still fails."""

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


def crash_reports(node):
    """How many times ProxySQL's crash handler reported a crash in start-up in the node's log (the wrapper's
    simulated one, and any the real binary had: a CI run saw 2.7.1 crash so on the start after it)."""
    text = (node.datadir / "stdout.log").read_text(errors="replace")
    return sum("init_mysql_servers" in report for report in text.split("Error: signal 11")[1:])


def test_a_start_that_crashes_in_proxysqls_start_up_is_started_again_and_counted(tmp_path):
    node = RealProxySQL(wrapper(tmp_path, crashes_in_init=True), tmp_path / "n", *free_ports(2), name="p")
    try:
        version = node.start()
        assert version.startswith("2.7.1") and (tmp_path / "crashed-once").exists()
        assert node.init_crashes == crash_reports(node) >= 1  # the simulated crash, and any real one, each counted
        node.stop()
        assert node.start(fresh=False).startswith("2.7.1")
        assert node.init_crashes == crash_reports(node)  # a real crash only, if any, counted as well
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
