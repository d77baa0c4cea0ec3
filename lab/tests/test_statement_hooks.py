"""lab/statement_hooks.at_statement, which the fault benches and the restart tests arm: act() runs once, at the
first matching statement to the one node, before it is sent or after its answer, and the statement still reaches
the node (a call through)."""

from apps.clients.proxysql import ProxySQLAdmin
from lab import demo
from lab.statement_hooks import at_statement

SET = "UPDATE global_variables SET variable_value='{}' WHERE variable_name='mysql-max_connections'"


def max_connections(double):
    return demo.admin_sql(
        double.port,
        "SELECT variable_value FROM global_variables WHERE variable_name='mysql-max_connections'",
        user=double.user,
        password=double.password,
    )[0][0]


def test_act_runs_once_before_or_after_the_matching_statement_and_the_statement_still_runs(proxysql_double_factory):
    hooked, other = proxysql_double_factory(2)
    seen = []
    for after, value in ((False, "1111"), (True, "2222")):
        with at_statement(
            hooked.port, lambda: seen.append(max_connections(hooked)), sql=SET.format(value), after=after
        ) as done:
            with ProxySQLAdmin("127.0.0.1", other.port, other.user, other.password) as admin:
                admin.run(SET.format(value))  # another node: not hooked
            with ProxySQLAdmin("127.0.0.1", hooked.port, hooked.user, hooked.password) as admin:
                admin.run("SELECT 1")  # another statement: not hooked
                assert not done.is_set()
                admin.run(f"  {SET.format(value).lower()}  ")  # the same statement: case and spaces aside
                assert done.is_set()
                admin.run(SET.format(int(value) + 1))  # once only
        assert max_connections(hooked) == str(int(value) + 1) and max_connections(other) == value
    # before the first statement act read the value as it was; after the second, the value that statement wrote
    assert seen[0] != "1111" and seen[1] == "2222", seen
    assert ProxySQLAdmin.run is not None and ProxySQLAdmin.run.__name__ == "run"  # the client's own run() again


def test_a_condition_decides_which_matching_statement_acts(proxysql_double_factory):
    (double,) = proxysql_double_factory(1)
    sent, acted = [], []
    with at_statement(double.port, lambda: acted.append(len(sent)), when=lambda: len(sent) == 2):
        with ProxySQLAdmin("127.0.0.1", double.port, double.user, double.password) as admin:
            for n in range(4):
                sent.append(n)
                admin.run("SELECT 1")
    assert acted == [2]  # the second statement (sent holds 2 by then), and only it
