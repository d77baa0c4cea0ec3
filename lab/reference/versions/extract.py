"""Reads ProxySQL's admin tables and variable names out of its source at a tag, one JSON per version.

From source, not from a running binary: `python lab/reference/versions/extract.py [--git-dir DIR]`
reads, at each tag, every `insert_into_tables_defs(tables_defs_<schema>, "<table>", MACRO)` in lib/*.cpp
(the tables ProxySQL creates), resolves MACRO through the `#define`s of include/*.h and lib/*.cpp to its
`CREATE TABLE` text, and reads `mysql_thread_variables_names[]` (lib/MySQL_Thread.cpp) and
`admin_variables_names[]` (lib/ProxySQL_Admin.cpp). Never imported by the product or the tests.
"""

import argparse
import json
import re
import subprocess
from pathlib import Path

GIT_DIR = "/work/.mirror/sysown+proxysql/repo"
# version the double answers as -> the source ref it was read from
VERSIONS = {"2.5": "v2.5.5", "2.6": "v2.6.6", "2.7": "v2.7.1", "3.0": "v3.0"}
HERE = Path(__file__).parent

DEFINE_RE = re.compile(r"^\s*#define\s+(\w+)\s+(.*?)\s*$")
INSERT_RE = re.compile(r'^\s*insert_into_tables_defs\(\s*tables_defs_(\w+)\s*,\s*"(\w+)"\s*,\s*(\w+)\s*\)')
# Parts of a build that a default (release) build leaves out: what a real node of that version lacks.
OPTIONAL_BUILDS = {"DEBUG", "PROXYSQLCLICKHOUSE"}
STRING_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')


def git(git_dir, *args):
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True, errors="replace"
    ).stdout


def source_files(git_dir, ref):
    names = git(git_dir, "ls-tree", "-r", "--name-only", ref, "include", "lib").split()
    return [n for n in names if n.endswith((".h", ".hpp", ".cpp"))]


def defines(text):
    """MACRO -> its body, continuation lines joined."""
    out = {}
    lines = text.replace("\\\n", " ").splitlines()
    for line in lines:
        m = DEFINE_RE.match(line)
        if m:
            out.setdefault(m.group(1), m.group(2))
    return out


def resolve(name, macros, depth=0):
    body = macros.get(name, "")
    if depth > 10:
        return ""
    if body.startswith('"'):
        return "".join(STRING_RE.findall(body))
    m = re.match(r"^(\w+)$", body)
    return resolve(m.group(1), macros, depth + 1) if m else ""


def columns(create):
    """Column names of a CREATE TABLE, in order (constraints skipped)."""
    body = create[create.index("(") + 1 : create.rindex(")")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    cols = []
    for part in parts:
        word = part.strip().split(" ", 1)[0].strip('`"')
        if word and word.upper() not in ("PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "CONSTRAINT"):
            cols.append(word)
    return cols


def conditioned(lines):
    """(line, condition) per line: the optional build (#ifdef DEBUG...) or "ldap" (init_ldap(): only with
    the LDAP plugin loaded) the line depends on, or None."""
    stack, in_ldap = [], False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#if"):
            words = stripped.replace("defined", " ").replace("(", " ").replace(")", " ").split()
            stack.append(next((w for w in words[1:] if w in OPTIONAL_BUILDS), None))
        elif stripped.startswith("#else") and stack:
            stack[-1] = None
        elif stripped.startswith("#endif") and stack:
            stack.pop()
        if re.match(r"^\w.*::init_ldap\(", line):
            in_ldap = True
        elif in_ldap and line.startswith("}"):
            in_ldap = False
        condition = next((c for c in stack if c), None) or ("ldap" if in_ldap else None)
        yield line, condition


def names_array(text, array):
    """(names, {name: condition}) of a `static char * <array>[] = {...}`."""
    start = text.index(f"{array}[]")
    body = text[start : text.index("};", start)]
    out, optional = [], {}
    for line, condition in conditioned(body.splitlines()):
        line = line.split("//", 1)[0]
        m = STRING_RE.search(line)
        if m and "(char *)" in line.replace("(char*)", "(char *)"):
            (optional.__setitem__(m.group(1), condition) if condition else out.append(m.group(1)))
    return out, optional


def extract(git_dir, ref):
    macros, inserts = {}, []
    for path in source_files(git_dir, ref):
        text = git(git_dir, "show", f"{ref}:{path}")
        macros.update({k: v for k, v in defines(text).items() if k not in macros})
        for line, condition in conditioned(text.splitlines()):
            m = INSERT_RE.match(line)
            if m:
                inserts.append((m.group(1), m.group(2), m.group(3), path, condition))
    tables, seen, optional_tables = {}, set(), {}
    for schema, table, macro, path, condition in inserts:
        if condition:
            optional_tables.setdefault(schema, {})[table] = condition
            continue
        if (schema, table) in seen:
            continue
        seen.add((schema, table))
        create = resolve(macro, macros)
        if "(" not in create:
            continue
        tables.setdefault(schema, {})[table] = {"columns": columns(create), "create": create, "source": path}
    thread = git(git_dir, "show", f"{ref}:lib/MySQL_Thread.cpp")
    admin = git(git_dir, "show", f"{ref}:lib/ProxySQL_Admin.cpp")
    commit = git(git_dir, "rev-parse", f"{ref}^{{commit}}").strip()
    mysql_names, mysql_optional = names_array(thread, "mysql_thread_variables_names")
    admin_names, admin_optional = names_array(admin, "admin_variables_names")
    return {
        "source": {
            "repository": "sysown/proxysql",
            "ref": ref,
            "commit": commit,
            "read_from": "source (git show), not a running binary",
            "tables": "insert_into_tables_defs(...) in lib/*.cpp, CREATE TABLE text from #define in include/, lib/",
            "variables": "lib/MySQL_Thread.cpp mysql_thread_variables_names[], "
            "lib/ProxySQL_Admin.cpp admin_variables_names[]",
        },
        "tables": {schema: {t: d["columns"] for t, d in sorted(ts.items())} for schema, ts in sorted(tables.items())},
        "create": {t: d["create"] for t, d in sorted(tables.get("admin", {}).items())},
        "optional_tables": optional_tables,
        "variables": {"mysql": sorted(mysql_names), "admin": sorted(admin_names)},
        "optional_variables": {
            **{f"mysql-{k}": v for k, v in mysql_optional.items()},
            **{f"admin-{k}": v for k, v in admin_optional.items()},
        },
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--git-dir", default=GIT_DIR)
    args = parser.parse_args()
    for version, ref in VERSIONS.items():
        facts = extract(args.git_dir, ref)
        facts["version"] = version
        (HERE / f"proxysql-{version}.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
        print(
            version,
            ref,
            {s: len(t) for s, t in facts["tables"].items()},
            {k: len(v) for k, v in facts["variables"].items()},
        )


if __name__ == "__main__":
    main()
