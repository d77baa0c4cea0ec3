"""Issue 21 §4: the configuration version is the only record of intent. The inventory rows (HostgroupMembership,
the hostgroup roles on Cluster) are its materialised copy, written by one function only, with the version and its
audit row in one transaction: apps/configuration/services.py::_write_inventory_read_model (called by record_version). An
operation, an admin edit or anything else computes the new content and calls record_version (or
record_operation / record_admin_edit)."""

import ast

from apps.tests.test_boundaries import ROOT, product_modules

WRITES = {"create", "update", "update_or_create", "get_or_create", "bulk_create", "bulk_update", "delete"}
ROLE_FIELDS = {
    "writer_hostgroup",
    "reader_hostgroup",
    "backup_writer_hostgroup",
    "offline_hostgroup",
    "writer_is_also_reader",
}
THE_ONE_WRITER = ("apps/configuration/services.py", "_write_inventory_read_model")
# A new cluster is created with its roles (the row must exist before its first version can name it).
CREATES_A_CLUSTER = {("apps/configuration/adoption.py", "apply_adoption")}


def _root(node):
    """The name a call chain starts from: HostgroupMembership in HostgroupMembership.objects.filter(...).update()."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _keywords(call):
    names = {k.arg for k in call.keywords if k.arg}
    for k in call.keywords:
        if k.arg == "defaults" and isinstance(k.value, ast.Dict):
            names |= {key.value for key in k.value.keys if isinstance(key, ast.Constant)}
    return names


def inventory_writes(source):
    """[(function, line, what)] for every write of inventory rows in the source."""
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call):
                method = getattr(child.func, "attr", None)
                if _root(child.func) == "HostgroupMembership" and method in WRITES | {"save"}:
                    found.append((function, child.lineno, f"HostgroupMembership ... .{method}()"))
                elif isinstance(child.func, ast.Name) and child.func.id == "HostgroupMembership":
                    found.append((function, child.lineno, "HostgroupMembership(...)"))
                elif method in WRITES and (roles := _keywords(child) & ROLE_FIELDS):
                    found.append((function, child.lineno, f".{method}({', '.join(sorted(roles))}=...)"))
            elif isinstance(child, (ast.Assign, ast.AugAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                found.extend(
                    (function, child.lineno, f"... .{t.attr} = ...")
                    for t in targets
                    if isinstance(t, ast.Attribute) and t.attr in ROLE_FIELDS
                )
            visit(child, name)

    visit(ast.parse(source), None)
    return found


def test_the_check_finds_each_way_of_writing_the_inventory():
    source = (
        "def finish(op):\n"
        "    HostgroupMembership.objects.create(server=s, hostgroup_id=1)\n"
        "    HostgroupMembership.objects.filter(server=s).update(status='OFFLINE_SOFT')\n"
        "    HostgroupMembership.objects.update_or_create(server=s, hostgroup_id=1, defaults={})\n"
        "    HostgroupMembership.objects.bulk_create([HostgroupMembership(server=s)])\n"
        "    Cluster.objects.filter(pk=1).update(writer_hostgroup=5)\n"
        "    cluster.reader_hostgroup = 6\n"
        "    HostgroupMembership.objects.filter(server=s).count()\n"
        "    Server.objects.filter(pk=1).update(maintenance=True)\n"
    )
    assert [(f, line) for f, line, _ in inventory_writes(source)] == [
        ("finish", 2),
        ("finish", 3),
        ("finish", 4),
        ("finish", 5),
        ("finish", 5),
        ("finish", 6),
        ("finish", 7),
    ]


def test_only_the_version_writes_the_inventory():
    modules = list(product_modules())
    assert any(str(m) == THE_ONE_WRITER[0] for m in modules)
    offenders, seen = [], set()
    for module in modules:
        for function, line, what in inventory_writes((ROOT / module).read_text()):
            if (str(module), function) == THE_ONE_WRITER:
                seen.add(THE_ONE_WRITER)
            elif (str(module), function) in CREATES_A_CLUSTER and what.startswith(".get_or_create("):
                continue
            else:
                offenders.append(f"{module}:{line} in {function}(): {what}")
    assert seen == {THE_ONE_WRITER}  # the check really sees the one writer
    assert offenders == [], (
        "inventory rows written outside configuration.services._write_inventory_read_model: compute the new "
        "content and call record_version (record_operation, record_admin_edit):\n" + "\n".join(offenders)
    )
