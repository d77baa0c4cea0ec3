"""Shared fixtures. The lab's fixtures (Galera lab, ProxySQL admin double) live in lab/fixtures_*.py;
this file chains them into the product's: lab_pair -> adopted_lab, redis_server -> live_redis, and the
personas (viewer/operator/admin users).

Personas and their rights:
  viewer_user    reads every page, changes nothing
  operator_user  also adopts ProxySQL nodes and runs operations
  admin_user     also edits the inventory (Django admin), overrides guards
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

pytest_plugins = [
    "lab.fixtures_proxysql",
    "lab.fixtures_galera",
    "lab.fixtures_replication",
    "lab.fixtures_dr",
    "lab.fixtures_real_proxysql",
    "lab.pytest_shards",
]


def missing(reason):
    """A test that cannot run here for want of a tool or of the reference folder: skipped on a developer's machine
    (and said on stderr), a FAILURE under CI (CI=true), where bin/setup installs the tools and the reference is
    checked out beside the project: a check that silently never runs would pass CI for ever."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; CI must have it (bin/setup, ../shared/proxysql-reference)", pytrace=False)
    print(f"SKIPPED: {reason}", file=sys.stderr)
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _pool_server_ids_forgotten():
    """The pollers cache PoolServer ids per process; a rolled-back test's ids must not reach the next test."""
    from apps.monitoring import pool

    pool.forget_servers()


POST_MIGRATE_TABLES = ("django_content_type", "auth_permission")  # what post_migrate builds, in foreign-key order


@pytest.fixture(scope="session", autouse=True)
def _post_migrate_rows_written_back_after_flush():
    """A transactional test ends with Django's flush of every table, which then sends post_migrate to build the
    content types and permissions again from the models: 250-300 ms of ORM work a test (159 s of a CI run's
    profile, docs/benchmarks.md). Those rows are the same every time, so the first flush of each database builds them
    as Django does and keeps them, and the later ones write them back in two bulk inserts with the same ids
    (apps/tests/test_flush_rows.py holds them equal to what post_migrate builds)."""
    from django.core.management.commands import flush

    built = flush.emit_post_migrate_signal
    kept = {}

    def build_or_write_back(verbosity, interactive, database, **kwargs):
        if database not in kept:
            built(verbosity, interactive, database, **kwargs)
            kept[database] = post_migrate_rows(database)
            return
        write_rows(database, kept[database])

    flush.emit_post_migrate_signal = build_or_write_back
    yield
    flush.emit_post_migrate_signal = built


def post_migrate_rows(database):
    """{table: (columns, rows)} of the tables post_migrate fills."""
    from django.db import connections

    connection = connections[database]
    taken = {}
    with connection.cursor() as cursor:
        for table in POST_MIGRATE_TABLES:
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)} ORDER BY id")
            taken[table] = ([c[0] for c in cursor.description], cursor.fetchall())
    return taken


def write_rows(database, taken):
    from django.db import connections

    connection = connections[database]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for table in POST_MIGRATE_TABLES:
            columns, rows = taken[table]
            placeholders = ",".join(["%s"] * len(columns))
            cursor.executemany(
                f"INSERT INTO {quote(table)} ({','.join(quote(c) for c in columns)}) VALUES ({placeholders})", rows
            )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab_pair(proxysql_double_pair, galera_lab):
    """Two ProxySQL doubles configured like the seeds' pair (lab/demo.py): writer hostgroup 100,
    readers 101, backup writers 102, in front of the Galera lab's ports, monitor user monitor/monitor.
    The Galera lab is up: a double really connects to the backends its client sessions use (a backend
    that does not answer gets SHUNNED there, as on ProxySQL)."""
    from lab import demo

    for double in proxysql_double_pair:
        demo.admin_sql(double.port, *demo.seed_statements(), user=double.user, password=double.password)
    return proxysql_double_pair


SECOND_CLUSTER_HOSTGROUPS = (200, 201, 202)


def second_cluster_statements(ports, writer=200):
    """Admin SQL adding a second Galera cluster's rows to a ProxySQL beside the seeds' (the same layout in
    hostgroups writer, writer+1, writer+2), for a ProxySQL that fronts two clusters."""
    first, *rest = ports
    rows = [(writer, first, 1000000, "writer"), (writer + 1, first, 100, "writer, reads elsewhere first")]
    rows += [(writer + 1, port, 10000, "reader") for port in rest]
    rows += [(writer + 2, port, 1000 - 100 * i, f"backup writer {i + 1}") for i, port in enumerate(rest)]
    return [
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections,comment) "
        f"VALUES ({hg},'127.0.0.1',{port},{weight},2000,'{comment}')"
        for hg, port, weight, comment in rows
    ] + ["LOAD MYSQL SERVERS TO RUNTIME", "SAVE MYSQL SERVERS TO DISK"]


@pytest.fixture
def shared_pair(lab_pair, dr_lab):
    """The lab pair fronting two Galera clusters: the Galera lab in hostgroups 100-102 (as lab_pair) and the DR
    lab's dc1 (127.0.0.1:3331-3333; dc2 holds the DR channel's replica) in 200-202, on both doubles. Nothing adopted yet."""
    from lab import demo

    ports = [node.port for node in dr_lab.dc1.nodes]
    for double in lab_pair:
        demo.admin_sql(double.port, *second_cluster_statements(ports), user=double.user, password=double.password)
    return lab_pair


@pytest.fixture
def adopted_shared(db, shared_pair, galera_lab):
    """(galera-lab cluster, dc1 cluster, [double1, double2]): one ProxySQL pair fronting two Galera clusters,
    each double adopted twice through the adopt service, which proposes the split by itself (the Galera lab's
    hostgroups first, the DR lab's dc1 for the second adoption of the same endpoint: dc1); the demo's traffic on hostgroups 100/101."""
    from apps.fleet.models import Cluster

    first, second = shared_pair
    for name in ("galera-lab", "dc1"):
        adopt_double(first, name, "proxysql-1")
        adopt_double(second, name, "proxysql-2")
    for double in shared_pair:
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
        double.traffic.set_sessions(hostgroup=101, count=8, kind="read")
    return Cluster.objects.get(name="galera-lab"), Cluster.objects.get(name="dc1"), shared_pair


@pytest.fixture
def live_redis(redis_server, settings):
    """settings.REDIS_URL pointed at the session's real redis-server, emptied for each test."""
    from apps.monitoring import live

    settings.REDIS_URL = redis_server
    live.client().flushdb()
    yield live.client()


def adopt_double(double, cluster_name, node_name, kind=None, roles=None):
    """Adopt one ProxySQL double through the product's own adopt service (read, plan, apply)."""
    from apps.audit.actor import Actor
    from apps.clients.proxysql import ProxySQLAdmin
    from apps.configuration import adoption as adopt

    # Setup, not a test of the timeouts: the product's 0.5 s connect timeout is for a real ProxySQL, and the double
    # answers from this process's threads, which a loaded 2-core machine can stall longer than that (seen once in CI).
    with ProxySQLAdmin(
        "127.0.0.1", double.port, double.user, double.password, connect_timeout=5, read_timeout=10
    ) as admin:
        snapshot = adopt.read_snapshot(admin)
        monitor = adopt.read_monitor_credentials(admin)
    plan = adopt.plan_adoption(
        snapshot,
        cluster_name=cluster_name,
        node_name=node_name,
        admin_host="127.0.0.1",
        admin_port=double.port,
        kind=kind,
        roles=roles,
    )
    assert plan.ok, plan.errors
    # Version 1 of a new cluster is recorded with the rows, as the adopt form and command do.
    return adopt.apply_adoption(
        plan,
        admin_user=double.user,
        admin_password=double.password,
        monitor=monitor,
        actor=Actor.command(label="test adoption"),
    )


def shun_backend(double, galera, n, hostgroups=(101,), restart=True, timeout=10):
    """A real SHUNNED row, as issue 9 met it on a real ProxySQL: `double`'s clients read through `hostgroups`
    while Galera node n is killed, until the double has shunned the node there (on this double only, in
    these hostgroups only). The clients then stop, and with `restart` the node rejoins (Synced): ProxySQL
    recovers a shunned server only when a client needs the hostgroup again, so the rows stay SHUNNED at
    runtime while memory says ONLINE. Returns the shunned (hostgroup, host, port) keys."""
    from lab import demo

    node = galera.node(n)
    want = {(hg, node.host, node.port) for hg in hostgroups}
    for hg in hostgroups:
        double.traffic.set_sessions(hostgroup=hg, count=4, kind="read")
    galera.kill(n)
    deadline = time.monotonic() + timeout
    while True:
        rows = demo.admin_sql(
            double.port,
            "SELECT hostgroup_id, hostname, port FROM runtime_mysql_servers WHERE status='SHUNNED'",
            user=double.user,
            password=double.password,
        )
        if {(int(hg), host, int(port)) for hg, host, port in rows} >= want:
            break
        assert time.monotonic() < deadline, f"the double did not shun {want} within {timeout} s: {rows}"
        time.sleep(0.1)
    for hg in hostgroups:
        double.traffic.clear_sessions(hostgroup=hg)
    if restart:
        galera.start(n)
    return want


@pytest.fixture
def adopted_lab(db, lab_pair, galera_lab):
    """(cluster, [double1, double2]): the lab cluster adopted through the product's adopt service, two
    ProxySQL doubles (seeds' layout) in front of the three Galera nodes, monitor credentials
    monitor/monitor, and on both doubles the demo's traffic: writer sessions pinned by auto-increment
    tokens (ProxySQL 2.7's default) and readers."""
    return adopt_pair(lab_pair, ("proxysql-1", "proxysql-2")), lab_pair


def adopt_pair(doubles, names):
    """Adopt each double into the cluster galera-lab under its name, and give it the demo's traffic: writer
    sessions pinned by auto-increment tokens (ProxySQL 2.7's default) and readers. Returns the cluster."""
    from apps.fleet.models import Cluster

    for double, name in zip(doubles, names):
        adopt_double(double, "galera-lab", name)
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
        double.traffic.set_sessions(hostgroup=101, count=8, kind="read")
    return Cluster.objects.get(name="galera-lab")


@pytest.fixture
def adopted_cluster_lab(db, proxysql_cluster_pair, galera_lab):
    """(cluster, [double1, double2]) as adopted_lab, but the two doubles form a ProxySQL Cluster with native sync on
    at ProxySQL's defaults (lab.fixtures_proxysql.proxysql_cluster_pair): a LOAD on one is pulled by the other."""
    from apps.fleet.models import Cluster
    from lab import demo

    first, second = proxysql_cluster_pair
    for double in proxysql_cluster_pair:
        demo.admin_sql(double.port, *demo.seed_statements(), user=double.user, password=double.password)
    adopt_double(first, "galera-lab", "proxysql-1")
    adopt_double(second, "galera-lab", "proxysql-2")
    return Cluster.objects.get(name="galera-lab"), proxysql_cluster_pair


@pytest.fixture
def adopted_mixed_lab(db, proxysql_double_factory, galera_lab):
    """(cluster, [old, new]) as adopted_lab, but the two doubles run different ProxySQL versions: proxysql-old
    answers as 2.5, proxysql-new as 2.7 (lab/reference/versions); no native sync between them."""
    from lab import demo
    from lab.fixtures_proxysql import join_cluster

    old = proxysql_double_factory(1, version="2.5")[0]
    new = proxysql_double_factory(1, version="2.7")[0]
    pair = join_cluster([old, new], sync=False)
    for double in pair:
        demo.admin_sql(double.port, *demo.seed_statements(), user=double.user, password=double.password)
    return adopt_pair(pair, ("proxysql-old", "proxysql-new")), pair


@pytest.fixture(scope="session")
def redis_server():
    """A real redis-server (Debian) on a free loopback port for this test run; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: run bin/setup")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="redis-test-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start within 10 s")
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


def database_url_for_subprocesses():
    """The URL of the test database, for processes (Celery workers) started by a test."""
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    return f"mysql://{s['USER']}:{s['PASSWORD']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


@pytest.fixture
def celery_broker(redis_server, settings):
    """Tasks sent by this test process go to the test's Redis (not a developer's on 6379)."""
    from controlplane.celery import app

    def point_at(url):
        settings.CELERY_BROKER_URL = url
        app.conf.broker_url = url
        # Connection and producer pools are rebuilt for the new URL (as Celery does after a fork).
        app._pool = None
        app.amqp._producer_pool = None

    point_at(redis_server)
    yield point_at
    point_at(None)


@pytest.fixture
def celery_factory(tmp_path):
    """start(kind, redis_url, concurrency=2, name=None, args=(), **env) runs a real `celery worker` or `celery beat`
    subprocess against the test database (a worker named `name`, e.g. w1@hostA, when given; `args` added to its
    command line); all are stopped after the test. Returns the Popen (its log: tmp_path/<kind>-N.log)."""
    procs = []

    def start(kind, redis_url, concurrency=2, name=None, args=(), **extra_env):
        env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "DATABASE_URL": database_url_for_subprocesses(),
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            **{k: str(v) for k, v in extra_env.items()},
        }
        command = [sys.executable, "-m", "celery", "-A", "controlplane", kind, "--loglevel", "INFO", *args]
        if kind == "worker":
            command += ["--concurrency", str(concurrency), "--without-gossip", "--without-mingle"]
            command += ["-n", name] if name else []
        else:
            command += ["--schedule", str(tmp_path / f"beat-schedule-{len(procs)}")]
        log = open(tmp_path / f"{kind}-{len(procs)}.log", "w+")
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        proc.log = log
        procs.append(proc)
        if kind == "worker":
            wait_ready(proc)
        return proc

    def wait_ready(proc):
        """Until the worker consumes: a plan confirmed before would wait in the queue, and a worker that boots
        slowly on a loaded machine would find it past its validity window (expired, as it should)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            proc.log.seek(0)
            if " ready." in proc.log.read():
                return
            if proc.poll() is not None:
                pytest.fail(f"the celery worker exited with {proc.returncode}; see {proc.log.name}")
            time.sleep(0.1)
        pytest.fail(f"the celery worker was not ready within 60 s; see {proc.log.name}")

    yield start
    # Killed, not shut down warm: the test is over, and a warm shutdown waited for the tasks running (up to 15 s, a
    # third of the time a CI pass spent in this fixture's teardown), then put the tasks it had prefetched back in the
    # queue, where a later test's worker on the same Redis could run them. A killed worker writes nothing more (its
    # database transaction rolls back with its connection); what it had prefetched stays unacknowledged in Redis for
    # the visibility timeout (an hour), past any test's time.
    for proc in procs:
        try:  # the whole group, even when its first process is gone: a pool's children outlive a killed parent
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in procs:
        proc.wait()
        proc.log.close()


def _user_with_role(django_user_model, username, role):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username=username, password="pw-" + username)
    user.groups.add(Group.objects.get_or_create(name=role)[0])  # transactional tests flush migration data
    if role == "admin":
        user.is_staff = user.is_superuser = True
        user.save()
    return user


@pytest.fixture
def viewer_user(db, django_user_model):
    return _user_with_role(django_user_model, "vera-viewer", "viewer")


@pytest.fixture
def operator_user(db, django_user_model):
    return _user_with_role(django_user_model, "otto-operator", "operator")


@pytest.fixture
def admin_user_role(db, django_user_model):
    return _user_with_role(django_user_model, "ada-admin", "admin")


@pytest.fixture
def operator_client(client, operator_user):
    client.force_login(operator_user)
    return client


@pytest.fixture
def viewer_client(client, viewer_user):
    client.force_login(viewer_user)
    return client


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium, headless, driven by Playwright (no browser download: /usr/bin/chromium)."""
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run bin/setup")
    # Playwright's sync API keeps an event loop on this thread; the ORM calls in browser tests are
    # ordinary synchronous code between page actions.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    # expect()'s own wait (5 s by default) as long as the page's actions': once on CI's loaded machine Swagger UI's
    # answer to a request was not there 5 s after the click (the actual text was not in the summary we got).
    from playwright.sync_api import expect

    expect.set_options(timeout=10_000)
    yield page
    context.close()


@pytest.fixture
def browser_login(page, live_server):
    """browser_login(user): logs the persona in through the login form (personas' password: pw-<name>)."""

    def login(user):
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("input[name=username]", user.username)
        page.fill("input[name=password]", "pw-" + user.username)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")

    return login


def pytest_report_header(config):
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"Django database: {db['ENGINE'].rsplit('.', 1)[-1]} {db.get('HOST') or db['NAME']}"
