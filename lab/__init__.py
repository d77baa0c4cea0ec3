"""The local lab: stand-ins and fixtures for tests and the demo.

Nothing in here is imported by production code paths. `lab.proxysql_double` is a lab double of
ProxySQL 2.7's admin interface (a MySQL-protocol server over SQLite); `lab.fixtures_proxysql` offers
it to pytest.
"""
