"""One way to build a change set's edit from a plain dict, whichever door it came through: the editor's forms
(their cleaned data), the API's JSON edits and the command line. `build` checks the edit's shape, turns a new
password into the secret to store (a clear-text password as its mysql_native_password hash, a hash as given),
keeps a mysql_users row's current password when the edit leaves it empty, and refuses a secret reference the
console does not hold. The edit it returns is what content.apply_edits understands; services store its secret.

Rows are checked against ProxySQL's constraints when the edits apply (content.apply_edits, check_row), and a
query rule's patterns against the cluster's regex engine by the effect check (findings.regex_invalid), for every
door alike."""

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import content as C
from . import secrets as S
from .tables import BY_NAME, MYSQL_USERS, VARIABLES, Table
from .variables import SECRETS

OPS = ("upsert", "delete", "set", "roles")
# What each operation needs besides its op.
NEEDS = {"upsert": ("table", "row"), "delete": ("table",), "set": ("name",), "roles": ("roles",)}


class EditRefused(ValueError):
    """An edit that cannot be built, with the reason an operator reads and the field it is about."""

    def __init__(self, message: str, field: str | None = None, *, fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.fields = fields or ({field: message} if field else {})  # every field at fault, for a form or the API


@dataclass(frozen=True)
class Built:
    edit: dict[str, Any]
    secret: tuple[str, str] | None = None  # (name of the new secret, value to store encrypted), for a new password


def upsert(
    table: Table, row: Mapping[str, Any], *, key: Iterable[Any] | None = None, password: str | None = None
) -> dict[str, Any]:
    """The edit that writes `row` into `table` (replacing the row whose key is `key`, if given). `password`: a
    mysql_users row's new password (clear text or hash), or empty to keep the current one."""
    edit: dict[str, Any] = {"op": "upsert", "table": table.name, "row": dict(row)}
    if table is MYSQL_USERS:
        edit["row"]["password"] = password or None
    if key is not None:
        edit["key"] = list(key)
    return edit


def delete(table: Table, key: Iterable[Any]) -> dict[str, Any]:
    return {"op": "delete", "table": table.name, "key": list(key)}


def set_variable(name: str, value: object) -> dict[str, Any]:
    return {"op": "set", "table": VARIABLES, "name": name, "value": value}


def roles(values: Mapping[str, int | None]) -> dict[str, Any]:
    return {"op": "roles", "roles": dict(values)}


def shape(edit: object) -> dict[str, Any]:
    """The edit with its table filled in (a set is always on global_variables), or EditRefused naming the fields
    that are missing or wrong."""
    if not isinstance(edit, dict) or edit.get("op") not in OPS:
        raise EditRefused(f"one of {', '.join(OPS)}", "op")
    op = edit["op"]
    missing = [f for f in NEEDS[op] if f not in edit]
    if missing:
        raise EditRefused(
            f"{op} needs {', '.join(missing)}.", missing[0], fields={f: f"{op} needs {f}." for f in missing}
        )
    if op == "set":
        edit = {**edit, "table": VARIABLES}
    if op in ("upsert", "delete"):
        if edit["table"] not in BY_NAME and not (op == "delete" and edit["table"] == VARIABLES):
            raise EditRefused(f"one of {', '.join(sorted(BY_NAME))}, or {VARIABLES}", "table")
        if op == "delete" and edit["table"] == VARIABLES and "name" not in edit:
            raise EditRefused("delete on global_variables needs name.", "name")
        if op == "delete" and edit["table"] != VARIABLES and "key" not in edit:
            raise EditRefused("delete needs the row's key.", "key")
    return edit


def build(
    edit: object, *, known: Collection[str], target: Callable[[], Mapping[str, Any]] | None = None, n: int = 1
) -> Built:
    """The edit ready to apply (Built). `known`: the cluster's secret references; `target`: a function giving the
    content the edit applies to, called only to keep a mysql_users row's password when the edit leaves it empty;
    `n`: its place, for errors."""
    try:
        shaped = shape(edit)
    except EditRefused as exc:
        raise EditRefused(f"edit {n}: {exc.field}: {exc}", exc.field, fields=exc.fields) from None
    if shaped["op"] == "roles":
        return Built(shaped)
    if shaped["table"] == MYSQL_USERS.name and shaped["op"] == "upsert" and isinstance(shaped["row"], dict):
        return _user_row(shaped, known, target, n)
    if shaped["table"] == VARIABLES and shaped["op"] == "set" and shaped["name"] in SECRETS:
        value = shaped.get("value")
        if isinstance(value, str) and value:
            return Built(shaped, (f"global_variables/{shaped['name']}", value))
        _check_reference(value, known, n)
    return Built(shaped)


def _user_row(
    edit: dict[str, Any], known: Collection[str], target: Callable[[], Mapping[str, Any]] | None, n: int
) -> Built:
    row = edit["row"]
    password, name = row.get("password"), row.get("username")
    if isinstance(password, str) and password and isinstance(name, str):
        return Built(edit, (f"mysql_users/{S.safe(name)}", C.password_hash(password)))
    if password in (None, "") and edit.get("key") is not None and target is not None:
        key = tuple(edit["key"])
        current = next((r for r in target().get(MYSQL_USERS.name) or [] if MYSQL_USERS.key_of(r) == key), None)
        if current is not None:  # an empty password field keeps the current one
            return Built({**edit, "row": {**row, "password": current["password"]}})
    _check_reference(password, known, n)
    return Built(edit)


def _check_reference(value: object, known: Collection[str], n: int) -> None:
    if C.is_secret(value) and not (isinstance(value["secret"], str) and value["secret"] in known):
        raise EditRefused(f"edit {n}: the console holds no secret {str(value['secret'])[:100]!r}")


def pointed_at(edit: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """The edit with its new password replaced by the reference of the secret stored for it."""
    if edit.get("table") == VARIABLES:
        return {**edit, "value": {"secret": ref}}
    return {**edit, "row": {**edit["row"], "password": {"secret": ref}}}
