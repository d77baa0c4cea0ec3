"""Configuration as code: a version as one YAML file, and a file back into a change set.

The file is stable (tables in a fixed order, rows by key, columns in ProxySQL's order, a column left out
when it holds its default) and holds no secret: a password is `{secret: <ref>}`, a reference to the
encrypted store. Reading a file back: every table must be listed (an empty one as `[]`), so a table is
never emptied by leaving it out; variables not listed keep their value. The file is desired state: it
applies against the cluster's current version whatever version it was exported from (`version:` names that
one, for the reader), and wins for every row it lists; a file equal to the current intent has nothing to do.
"""

import yaml

from apps.fleet.models import HOSTGROUP_MAX

from . import content as C
from .tables import BY_NAME, MYSQL_USERS, TABLES, VARIABLES, RowError, check_row, typed_row
from .variables import SECRETS as SECRET_VARIABLES

# What a file may hold (hostile input must cost a clear refusal, never memory, a 500 or a stuck worker): no
# anchors or aliases (a 12 KB chain of them expanded to 35 MB), nesting at most MAX_DEPTH deep, numbers of at
# most MAX_DIGITS digits, MAX_ROWS rows a table, MAX_FILE_CHARS characters, MAX_VALUES values (keys and values,
# counted before anything is built: a 4 MB file of 200,000 variables took 5-7 s to build; a refusal costs ~0.3 s).
MAX_DEPTH = 16
MAX_DIGITS = 20
MAX_ROWS = 20_000
MAX_FILE_CHARS = 5 * 1024 * 1024
MAX_VALUES = 100_000

HEADER = (
    "# ProxySQL configuration of cluster {cluster}, version {version}, exported by the control plane.\n"
    "# It is desired state: edit it, then manage.py config diff FILE, config plan FILE, config apply FILE\n"
    "# (or upload it on the cluster's configuration page). Passwords are references to the console's\n"
    "# encrypted store ({{secret: ...}}); every table must stay listed; variables not listed keep their value.\n"
)


class FileError(ValueError):
    """The file cannot be read as a configuration: where and why."""


class _StrictLoader(yaml.CSafeLoader):
    """libyaml's safe loader (linear, in C) with integers of bounded length; _check_events has already refused
    aliases and deep nesting, before anything is composed."""

    def construct_yaml_int(self, node):
        if len(node.value.lstrip("+-").replace("_", "")) > MAX_DIGITS:
            raise FileError(f"line {node.start_mark.line + 1}: a number longer than {MAX_DIGITS} digits")
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def _check_events(text):
    """No alias, no node nested more than MAX_DEPTH deep (the document itself is level 1), at most MAX_VALUES
    scalars, read from libyaml's events: flat, so a file nested 100,000 deep costs a refusal, never a recursion,
    and the pass stops at the first value too many."""
    depth = values = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(event, yaml.ScalarEvent):
            values += 1
            if values > MAX_VALUES:
                raise FileError(
                    f"line {event.start_mark.line + 1}: the file holds more than {MAX_VALUES:,} values "
                    "(names and values counted): no ProxySQL configuration is that large"
                )
        if isinstance(event, yaml.AliasEvent):
            raise FileError(
                f"line {event.start_mark.line + 1}: anchors and aliases (& and *) are not accepted in a "
                "configuration file: write each value out"
            )
        if isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, (yaml.CollectionStartEvent, yaml.ScalarEvent)):
            if depth + 1 > MAX_DEPTH:
                raise FileError(f"line {event.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
            depth += isinstance(event, yaml.CollectionStartEvent)


def load(text):
    """The YAML document of a file, read strictly (_check_events, _StrictLoader); FileError says what is wrong."""
    if len(text) > MAX_FILE_CHARS:
        raise FileError(f"the file has {len(text):,} characters, more than {MAX_FILE_CHARS:,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FileError("the file holds a lone surrogate (not text)") from None
    try:
        _check_events(text)
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as exc:
        if "exceeded maximum nesting depth" in (exc.problem or ""):  # libyaml's own bound, met reading ahead
            raise FileError(f"line {exc.problem_mark.line + 1}: nested more than {MAX_DEPTH} levels deep") from None
        if "invalid Unicode character escape code" in (exc.problem or ""):  # libyaml's word for "\\ud800"
            raise FileError(
                f"line {exc.problem_mark.line + 1}: an escape names no character (a lone surrogate or "
                "a code beyond U+10FFFF is not text)"
            ) from None
        raise FileError(f"not valid YAML: {exc}") from None
    except yaml.YAMLError as exc:
        raise FileError(f"not valid YAML: {exc}") from None
    return doc


def export(version):
    content = version.content
    doc = {
        "cluster": version.cluster.name,
        "version": version.number,
        "roles": content.get("roles") or {},
        "hostgroups": content.get("hostgroups") or [],
    }
    for table in TABLES:
        doc[table.name] = [_compact(table, row) for row in content.get(table.name) or []]
    doc[VARIABLES] = dict(content.get(VARIABLES) or {})
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
    name = "".join(c if c.isprintable() else "?" for c in version.cluster.name)  # the comment stays one line
    return HEADER.format(cluster=name, version=version.number) + body


def _compact(table, row):
    out = {}
    for col in table.columns:
        value = row.get(col.name)
        if col.name in table.key or value != col.default:
            out[col.name] = value
    return out


def cluster_of(text):
    """The name of the cluster a file is for (its `cluster:`); FileError when there is none."""
    doc = load(text)
    name = doc.get("cluster") if isinstance(doc, dict) else None
    if not isinstance(name, str) or not name:
        raise FileError("the file names no cluster (`cluster:`): name it, or give the cluster before the file")
    return name


def read(text, cluster):
    """(based_on_version, content) from a file's text; FileError says what is wrong and where."""
    doc = load(text)
    if not isinstance(doc, dict):
        raise FileError("the file must be a YAML mapping (cluster, version, roles, tables...)")
    if doc.get("cluster") not in (None, cluster.name):
        raise FileError(f"this file is for cluster {doc.get('cluster')!r}, not {cluster.name!r}")
    version = doc.get("version")
    if version is not None and (not isinstance(version, int) or version < 1):
        raise FileError("version must be the number of the version the file was exported from")
    out = C.empty()
    roles = doc.get("roles") or {}
    if not isinstance(roles, dict):
        raise FileError("roles must be a mapping (writer, reader, backup_writer, offline, writer_is_also_reader)")
    out["roles"] = {
        k: _int_or_none(v, f"roles.{k}") for k, v in roles.items() if k in (*C.ROLE_KEYS, "writer_is_also_reader")
    }
    out["hostgroups"] = [_int_or_none(v, "hostgroups") for v in doc.get("hostgroups") or []]
    for table in TABLES:
        if table.name not in doc:
            raise FileError(f"{table.name} is missing: list it (write `{table.name}: []` to empty it)")
        rows = doc[table.name] or []
        if not isinstance(rows, list):
            raise FileError(f"{table.name} must be a list of rows")
        if len(rows) > MAX_ROWS:
            raise FileError(f"{table.name} has {len(rows):,} rows, more than {MAX_ROWS:,}")
        seen = set()
        for n, raw in enumerate(rows, start=1):
            if not isinstance(raw, dict):
                raise FileError(f"{table.name} row {n} must be a mapping of column: value")
            unknown = set(raw) - set(table.column_names)
            if unknown:
                raise FileError(f"{table.name} row {n}: unknown column(s) {', '.join(sorted(unknown))}")
            try:
                secrets = {k: v for k, v in raw.items() if C.is_secret(v)}
                for k, v in secrets.items():
                    _check_secret(v, f"{table.name} row {n}: {k}", allowed=table is MYSQL_USERS and k == "password")
                plain = {k: (None if k in secrets else v) for k, v in raw.items()}
                row = typed_row(table, plain, strict=False)
                check_row(table, {**row, **{k: "x" for k in secrets}})
                row.update(secrets)
            except RowError as exc:
                raise FileError(f"{table.name} row {n}: {exc.column} {exc.message}") from None
            if table is BY_NAME["mysql_servers"]:
                row["status"] = row["status"].upper()
            key = table.key_of(row)
            if key in seen:
                raise FileError(f"{table.name} row {n}: a second row with key {list(key)}")
            seen.add(key)
            out[table.name].append(row)
    variables = doc.get(VARIABLES) or {}
    if not isinstance(variables, dict):
        raise FileError("global_variables must be a mapping of name: value")
    for name, value in variables.items():
        if C.is_secret(value):
            _check_secret(value, f"global_variables {name}", allowed=name in SECRET_VARIABLES)
        elif isinstance(value, (dict, list)):
            raise FileError(f"global_variables {name}: a value must be text or a number")
    out[VARIABLES] = {str(k): (v if C.is_secret(v) else ("" if v is None else _text(v))) for k, v in variables.items()}
    return version, out


def _check_secret(value, where, *, allowed):
    """A `{secret: <ref>}` stands only where a password goes, and names its reference as text."""
    if not allowed:
        raise FileError(f"{where}: a {{secret: ...}} reference stands only for a password")
    if set(value) != {"secret"} or not isinstance(value["secret"], str) or not 0 < len(value["secret"]) <= 200:
        raise FileError(f"{where}: write a secret as {{secret: <reference>}}, the reference as text")


def _int_or_none(value, where):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= HOSTGROUP_MAX:
        raise FileError(f"{where} must be a hostgroup number (0 to {HOSTGROUP_MAX})")
    return value


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def target_from_file(base_content, file_content):
    """The configuration a file asks for: its tables and roles; variables it lists over the base's."""
    target = dict(file_content)
    target[VARIABLES] = {**(base_content.get(VARIABLES) or {}), **file_content[VARIABLES]}
    if not target.get("roles"):
        target["roles"] = base_content.get("roles") or {}
    return target
