"""The product does not depend on the lab: no product module (apps/, workers/, controlplane/) imports
anything from lab/. Tests may use the lab's fixtures and doubles, so modules under a tests/ directory
(and test_*.py, conftest.py) do not count."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("apps", "workers", "controlplane")


def product_modules():
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "tests" in rel.parts or path.name.startswith("test_") or path.name == "conftest.py":
                continue
            yield rel


def imports_of(source: str, package: str) -> list[str]:
    """Every `import <package>...`, `from <package>... import` and import_module("<package>...") in the source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name == package or a.name.startswith(package + ".")]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and (node.module == package or node.module.startswith(package + "."))
        ):
            found.append(f"from {node.module} import ...")
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).split(".")[0] == package
        ):
            found.append(f"import_module({node.args[0].value!r})")
    return found


def lab_imports(source: str) -> list[str]:
    return imports_of(source, "lab")


def test_the_check_finds_each_way_of_importing_the_lab():
    assert lab_imports(
        "from lab import demo\nimport lab.galera\nimport labels\nfrom .lab import x\n"
        "def f():\n    from lab.galera import GaleraLab\n"
        "importlib.import_module('lab.demo')\n"
    ) == ["from lab import ...", "import lab.galera", "from lab.galera import ...", "import_module('lab.demo')"]


def test_no_product_module_imports_the_lab():
    modules = list(product_modules())
    assert any(str(m).startswith("apps/fleet/") for m in modules)  # the walk really reads the apps
    offenders = {str(m): found for m in modules if (found := lab_imports((ROOT / m).read_text()))}
    assert offenders == {}, "product modules import the lab (move lab-only code to lab/): " + repr(offenders)


# Issue 25: benchmarks live in lab/ (lab/bench_*.py, the lab app's bench_* commands), never in a product package,
# tests/ directories included: a benchmark is not a test, and its scratch fills and timings are not the product's.
def benchmark_modules():
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name.startswith("bench"):
                yield str(path.relative_to(ROOT))


def test_no_product_package_holds_benchmark_code():
    assert list(benchmark_modules()) == [], "move benchmarks to lab/ (bench_*.py, lab/management/commands/)"


# Issue 25: one function for a cluster's poll intervals and one for staleness (apps/monitoring/status.py). Each
# copy of the rule elsewhere had drifted (a hard-coded 2.0 s, a 3x + 2 s, a missing default).
INTERVAL_RULES = re.compile(
    r"STALE_FACTOR\s*\*|\*\s*STALE_FACTOR|MONITOR_DEFAULT_INTERVAL_S|"
    r"poll_interval_s\s+or\b|\b\d+(\.\d+)?\s*\*\s*[\w.\[\]\"']*poll_interval_s|"
    r"\b3(\.0)?\s*\*\s*[\w.\[\]\"']*(interval|INTERVAL_S)\b"
)  # STALE_FACTOR's 3, written out
INTERVAL_HOME = {"apps/monitoring/status.py"}


def test_the_check_finds_each_copy_of_the_interval_rules():
    assert [
        bool(INTERVAL_RULES.search(line))
        for line in (
            "x = STALE_FACTOR * interval",
            "age > status.STALE_FACTOR * c.interval",
            "poll_s = cluster.poll_interval_s or 2.0",
            "cap = 3 * channel.replica_cluster.backend_poll_interval_s",
            "settings.MONITOR_DEFAULT_INTERVAL_S",
            "status.stale_after(status.backend_interval(cluster))",
            "GAP_FACTOR_RAW = status.STALE_FACTOR",
            "limit_n, limit_s = 3 * c.interval, 3 * c.backend_interval",
            "return 3 * settings.MONITOR_DIGEST_INTERVAL_S",
            "since = now - 2 * settings.MONITOR_DIGEST_INTERVAL_S - 5",
        )
    ] == [True, True, True, True, True, False, False, True, True, False]


def test_poll_intervals_and_staleness_are_computed_in_one_place():
    offenders = {}
    for module in product_modules():
        if str(module) in INTERVAL_HOME or module.parts[0] == "controlplane":  # settings and beat read the default
            continue
        lines = [line.strip() for line in (ROOT / module).read_text().splitlines() if INTERVAL_RULES.search(line)]
        if lines:
            offenders[str(module)] = lines
    assert offenders == {}, "use apps.monitoring.status (proxysql_interval, backend_interval, stale_after): " + repr(
        offenders
    )


# Issue 25: the apps queue Celery tasks by their stable names (controlplane.tasks.enqueue) and never import
# workers/: the tasks import the apps' services, so an app importing a task module closed an import circle.
def test_no_app_imports_the_workers():
    assert imports_of(
        "from workers.alerts import deliver\nimport workers\nfrom workersx import y\n"
        "def f():\n    from workers import alerts\n",
        "workers",
    ) == ["from workers.alerts import ...", "import workers", "from workers import ..."]
    offenders = {
        str(m): found
        for m in product_modules()
        if m.parts[0] == "apps" and (found := imports_of((ROOT / m).read_text(), "workers"))
    }
    assert offenders == {}, "queue tasks by name with controlplane.tasks.enqueue(name, args): " + repr(offenders)


def queued_names():
    """The task names passed to enqueue("...") by product modules."""
    names = {}
    for module in product_modules():
        for node in ast.walk(ast.parse((ROOT / module).read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "enqueue":
                assert node.args and isinstance(node.args[0], ast.Constant), f"{module}: enqueue() takes a literal name"
                names.setdefault(node.args[0].value, []).append(str(module))
    return names


def test_every_task_queued_by_name_exists():
    from controlplane.celery import app

    app.loader.import_default_modules()  # workers/, as a worker loads them (app.conf.imports)
    names = queued_names()
    assert {"operations.execute", "alerts.deliver"} <= set(names)  # the walk really reads the callers
    unknown = {name: where for name, where in names.items() if name not in app.tasks}
    assert unknown == {}, "no task of that name in workers/: " + repr(unknown)


# Issue 21/25: an order of the apps. An app's CORE modules (all but its doors) import only the cores of apps below it
# in ORDER, at any level (an import inside a function is a dependency all the same). DOORS (each app's views, urls,
# forms, admin, management commands, templatetags; the api app; apps/pages, the contexts of pages mixing apps; and
# workers/) may import any core, but never another app's views or urls.
ORDER = [
    "clients",  # the network clients: ProxySQL admin, backend MySQL
    "plans",  # the plan vocabulary (Plan, Step, Guard, Sql) and the registries of kinds: pure data
    "audit",  # the hash-chained log every app records into
    "fleet",  # the inventory: clusters, nodes, backends; the inference of roles
    "accounts",  # roles and tokens (audited; token scopes name clusters)
    "monitoring",  # polls, the latest state, history, charts
    "configuration",  # the record of intent: versions, change sets, contents, drift
    "digests",  # query digests and the rules made from them
    "operations",  # plans, the executor, switchover, drain, repair, rules
    "dr",  # replication channels between clusters and their moves
    "alerts",  # rules over everything above, notifications
    "rollouts",  # one change to many clusters in waves, through change sets, gated by polls and alerts
    "reports",  # health reports, over everything above
]
DOOR_NAMES = {"views.py", "urls.py", "forms.py", "admin.py"}
DOOR_APPS = {"api", "pages"}


def is_door(rel):
    return (
        rel.parts[1] in DOOR_APPS or rel.name in DOOR_NAMES or "management" in rel.parts or "templatetags" in rel.parts
    )


def app_imports(source):
    """{(app, module path under it)} of every `apps.<app>...` import in the source, at any level."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {(n.split(".")[1], n) for n in names if n.startswith("apps.") and n.count(".") >= 1}
    return found


def upward_imports():
    """{module: apps above its own that it imports} for the cores; {door: other apps' views/urls it imports}."""
    rank = {app: i for i, app in enumerate(ORDER)}
    upward, doors = {}, {}
    for rel in product_modules():
        if rel.parts[0] != "apps" or len(rel.parts) < 3 or rel.parts[1] == "tests":
            continue
        app = rel.parts[1]
        found = app_imports((ROOT / rel).read_text())
        if is_door(rel):
            bad = {name for other, name in found if other != app and name.split(".")[2:3] in (["views"], ["urls"])}
            if bad:
                doors[str(rel)] = bad
        elif app in rank:
            bad = {other for other, _ in found if other in rank and rank[other] > rank[app]}
            if bad:
                upward[str(rel)] = bad
    return upward, doors


def test_the_order_check_finds_upward_and_door_to_door_imports():
    assert app_imports(
        "from apps.operations.locks import Lock\ndef f():\n    import apps.alerts.evaluate\n"
        "from apps.monitoring import views as v\n"
    ) == {
        ("operations", "apps.operations.locks"),
        ("operations", "apps.operations.locks.Lock"),
        ("alerts", "apps.alerts.evaluate"),
        ("monitoring", "apps.monitoring"),
        ("monitoring", "apps.monitoring.views"),
    }
    assert is_door(Path("apps/fleet/views.py")) and is_door(Path("apps/pages/fleet.py"))
    assert not is_door(Path("apps/fleet/inference.py"))
    assert set(ORDER) | DOOR_APPS | {"tests"} == {
        p.name for p in (ROOT / "apps").iterdir() if (p / "__init__.py").exists()
    }  # every app has its place


def test_the_apps_import_each_other_in_one_order():
    upward, doors = upward_imports()
    assert doors == {}, "a door imports another app's views or urls (build the context in apps/pages): " + repr(doors)
    assert upward == {}, f"imports against the order {ORDER} (move the code to the app that may hold it): {upward!r}"


# Functions outside the doors that take Django's request: the request's own machinery (login, middleware, the role
# decorator, the scrape check, the Actor's builder, record()'s keywords for the doors' refusal rows), never a service.
# A service takes an Actor (apps/audit/actor.py), so that every door calls it the same way (issue 25).
REQUEST_HANDLERS = {
    "apps/accounts/adminsite.py": {"login", "password_change"},  # the admin site's own views
    "apps/accounts/context_processors.py": {"roles"},
    "apps/accounts/middleware.py": {"__call__"},
    "apps/accounts/roles.py": {"wrapped"},  # require_role()
    "apps/accounts/services.py": {"audit_logout"},  # Django's user_logged_out signal
    "apps/accounts/tokens.py": {"authenticate"},  # a bearer token's check, by address
    "apps/audit/actor.py": {"of_request"},
    "apps/audit/services.py": {"record", "_actor_of"},
    "apps/monitoring/scrape_access.py": {"_bearer", "refusal", "_api_token_refusal", "_refuse"},
}


def functions_taking_a_request():
    found = {}
    for rel in product_modules():
        if rel.parts[0] != "apps" or "tests" in rel.parts or "migrations" in rel.parts or is_door(rel):
            continue
        for node in ast.walk(ast.parse((ROOT / rel).read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                if any(a.arg == "request" for a in args):
                    found.setdefault(str(rel), set()).add(node.name)
    return found


def test_services_take_an_actor_not_a_request():
    found = functions_taking_a_request()
    new = {
        m: names - REQUEST_HANDLERS.get(m, set())
        for m, names in found.items()
        if names - REQUEST_HANDLERS.get(m, set())
    }
    assert new == {}, f"these take Django's request; take `actor` (apps/audit/actor.py) instead: {new!r}"
    assert "apps/audit/actor.py" in found  # the walk reads the modules it should


# Issue 35: the plan vocabulary (Plan, Step, Guard, Sql) and the registries of operation and step kinds are pure data
# below every app that plans (apps/plans, low in ORDER), so that configuration plans its change sets and registers
# their kind itself; what a planner below operations needs of the apps above comes through registry.planning().
# Their old import paths (re-export packages under apps/operations) are gone, and nothing names them again.
OLD_MODULES = ("apps.operations.plans", "apps.operations.registry", "apps.operations.change_set")
OLD_NAMED = re.compile(r"\bapps\.operations\.(plans|registry|change_set)\b")  # in an import, a string, a comment


def test_the_plan_vocabulary_is_pure_data():
    modules = sorted((ROOT / "apps" / "plans").glob("*.py"))
    assert {m.name for m in modules} >= {"vocabulary.py", "registry.py"}
    found = {
        str(m.relative_to(ROOT)): sorted(
            imports_of(m.read_text(), "django")
            + [name for _, name in app_imports(m.read_text()) if not name.startswith("apps.clients.secret_refs")]
        )
        for m in modules
    }
    assert {m: names for m, names in found.items() if names} == {}, "apps/plans imports no Django and no app"


def old_path_references(rel: Path, source: str) -> list[str]:
    """Every import of an old path in the module at rel (absolute, `from apps.operations import plans`, relative
    inside apps/operations) and every dotted old name in its text (mock targets, settings, task names)."""
    package = list(rel.parent.parts)
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] if node.level else [])
            module = ".".join(p for p in (base, node.module or "") if p)
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found += [n for n in names if any(n == old or n.startswith(old + ".") for old in OLD_MODULES)]
    return found + [m.group(0) for m in OLD_NAMED.finditer(source)]


def test_the_check_finds_each_way_of_naming_an_old_path():
    source = (
        "from apps.operations import registry, executor\nfrom . import change_set\nfrom .plans import Plan\n"
        "def f():\n    import apps.operations.locks\n    return 'apps.operations.registry.choices'\n"
    )
    assert sorted(old_path_references(Path("apps/operations/models.py"), source)) == [
        "apps.operations.change_set",
        "apps.operations.plans",
        "apps.operations.plans.Plan",
        "apps.operations.registry",
        "apps.operations.registry",
    ]
    assert old_path_references(Path("apps/fleet/models.py"), "from . import registry\n") == []


def test_configuration_registers_its_change_sets_and_the_old_paths_are_gone():
    from apps.plans.registry import KINDS, STEPS

    assert KINDS["config"].planner.__module__ == "apps.configuration.change_set"
    assert {STEPS[k].execute.__module__ for k in ("config_verify", "config_record")} == {
        "apps.configuration.change_set_steps"
    }
    for old in OLD_MODULES:
        place = ROOT.joinpath(*old.split("."))
        assert not place.with_suffix(".py").exists() and not list(place.glob("**/*.py")), old
    modules = [
        p.relative_to(ROOT) for package in (*PRODUCT_PACKAGES, "lab") for p in sorted((ROOT / package).rglob("*.py"))
    ]
    modules += [Path("conftest.py"), Path("manage.py")]
    assert {Path("apps/operations/tests/test_new_kind.py"), Path("lab/bench_config.py")} <= set(modules)  # tests, lab
    this = Path(__file__).resolve().relative_to(ROOT)
    offenders = {
        str(m): found for m in modules if m != this and (found := old_path_references(m, (ROOT / m).read_text()))
    }
    assert offenders == {}, (
        "name apps.plans.vocabulary, apps.plans.registry or apps.configuration.change_set instead: " + repr(offenders)
    )


# Issue 35: layers inside an app. No import circle between the modules of one app folder, an import inside a function
# counting as one at the top (it is a dependency all the same): split the low part (rows, guards, pure helpers) from
# the high one (the workflow that runs, retries, composes) instead of hiding a circle in a function.
def module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(rel: Path, source: str) -> set[str]:
    """Every dotted name an import of the module at rel names, at any level, relative imports resolved: for
    `from .x import y` both `<package>.x` and `<package>.x.y` (y may be a module)."""
    package = module_name(rel).split(".")
    if rel.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found |= {module} | {f"{module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def app_module_paths():
    """{module name: path} of the product modules under apps/ (tests excepted, migrations included)."""
    return {module_name(rel): rel for rel in product_modules() if rel.parts[0] == "apps"}


def circles_inside_apps(sources=None):
    """The import circles between modules of one app: each a sorted tuple of module names (a strongly connected part
    of the graph of imports inside each app folder). `sources`: {path: text}, the tree's files when None."""
    sources = sources or {rel: (ROOT / rel).read_text() for rel in app_module_paths().values()}
    modules = {module_name(rel): rel for rel in sources}
    graph = {
        name: sorted(
            other
            for other in imported_names(rel, sources[rel])
            if other in modules and other != name and other.split(".")[:2] == name.split(".")[:2]
        )
        for name, rel in modules.items()
    }
    order, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(name):  # Tarjan's strongly connected components
        order[name] = low[name] = len(order)
        stack.append(name)
        on_stack.add(name)
        for other in graph[name]:
            if other not in order:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in on_stack:
                low[name] = min(low[name], order[other])
        if low[name] == order[name]:
            part = []
            while not part or part[-1] != name:
                part.append(stack.pop())
                on_stack.discard(part[-1])
            if len(part) > 1:
                circles.append(tuple(sorted(part)))

    for name in sorted(graph):
        if name not in order:
            visit(name)
    return sorted(circles)


# Left for now, each with why; remove it when it is broken (the test fails while a listed circle no longer exists).
CIRCLES_LEFT: set[tuple[str, ...]] = set()


def test_the_circle_check_finds_circles_at_any_level_and_relative():
    sources = {
        Path("apps/x/a.py"): "from . import b\n",
        Path("apps/x/b.py"): "def f():\n    from .c import g\n",
        Path("apps/x/c.py"): "from apps.x.a import h\n",
        Path("apps/x/d.py"): "from . import a\n",
        Path("apps/y/e.py"): "from apps.x import d\n",
        Path("apps/x/__init__.py"): "",
    }
    assert circles_inside_apps(sources) == [("apps.x.a", "apps.x.b", "apps.x.c")]
    assert circles_inside_apps({Path("apps/x/a.py"): "from . import b\n", Path("apps/x/b.py"): "import json\n"}) == []


def test_no_import_circle_inside_an_app():
    modules = app_module_paths()
    assert "apps.operations.executor" in modules and "apps.audit.migrations.0001_initial" in modules
    circles = set(circles_inside_apps())
    assert circles - CIRCLES_LEFT == set(), (
        "import circles inside an app (split the low part from the workflow "
        f"above it): {sorted(circles - CIRCLES_LEFT)}"
    )
    assert CIRCLES_LEFT - circles == set(), f"broken since: remove from CIRCLES_LEFT {sorted(CIRCLES_LEFT - circles)}"


# Issue 35: an import inside a function says why it is not at the top of its module, in a `# why:` comment on the
# import's lines, or on or above the first of its run of imports (Django's app registry not ready yet, an import circle left, an optional
# or heavy library): otherwise it belongs at the top, where the module's dependencies are read.
WHY = "# why:"


def imports_inside_functions_without_why(source: str) -> list[int]:
    """The line numbers of imports inside a function (or a method) said by no `# why:` comment: on the import's own
    lines, or on the first import of the run of imports it belongs to (statements one after another), or above it."""
    lines = source.splitlines()
    found = set()
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            for block in (getattr(node, name, None) for name in ("body", "orelse", "finalbody")):
                if not isinstance(block, list):
                    continue
                run_start = None
                for statement in block:
                    if not isinstance(statement, (ast.Import, ast.ImportFrom)):
                        run_start = None
                        continue
                    run_start = run_start or statement
                    said = (
                        lines[statement.lineno - 1 : statement.end_lineno]
                        + lines[run_start.lineno - 2 : run_start.end_lineno]
                    )  # the run's first says it for all
                    if not any(WHY in line for line in said):
                        found.add(statement.lineno)
    return sorted(found)


def test_the_check_finds_imports_inside_functions_without_a_reason():
    source = (
        "import json\n\n\ndef f():\n    from . import a  # why: a imports this module\n"
        "    # why: the app registry is not ready at import\n    from .models import M\n\n    from .x import y\n"
        "    import re\n    if a:\n        import os\n\n\nclass C:\n    def m(self):\n        from x import (y,\n"
        "                       z)\n"
    )
    assert imports_inside_functions_without_why(source) == [12, 17]


def test_every_import_inside_a_function_says_why():
    modules = list(product_modules())  # apps/, workers/ and controlplane/
    offenders = {
        str(rel): lines for rel in modules if (lines := imports_inside_functions_without_why((ROOT / rel).read_text()))
    }
    assert offenders == {}, (
        "move these imports to the top of their module, or say why they stay inside the function "
        f"({WHY} ...): {offenders}"
    )


# Issue 35 item 4: the composite pages (overview, cluster, ProxySQL node, backend, incident) are apps/pages' views, and no door
# reads a node live itself: the network clients are opened by selectors and services, where their timeouts and
# errors are said once.
LIVE_CLIENTS = ("ProxySQLAdmin", "BackendClient")


def test_no_door_opens_a_network_client_itself():
    doors = (
        [p for p in ROOT.glob("apps/*/views.py")]
        + list(ROOT.glob("apps/pages/*.py"))
        + list(ROOT.glob("apps/api/endpoints/*.py"))
    )
    opening = {str(p.relative_to(ROOT)): [n for n in LIVE_CLIENTS if n in p.read_text()] for p in doors}
    assert {p: names for p, names in opening.items() if names} == {}


def test_the_composite_pages_are_the_pages_apps_views():
    from django.urls import resolve, reverse

    for name in (
        "overview",
        "cluster",
        "cluster_drift",
        "proxysql_node",
        "proxysql_node_runtime",
        "server",
        "server_state",
        "incident",
    ):
        view = resolve(reverse(f"pages:{name}", args=[] if name in ("overview", "incident") else [1])).func
        assert view.__module__ == "apps.pages.views", (name, view.__module__)
