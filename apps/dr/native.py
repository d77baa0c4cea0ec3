"""MySQL 8.0.22+ replicas: their own asynchronous connection failover, configured instead of acting as the
channel's source failover.

From MySQL 8.0.22 a replica keeps a source list per channel (asynchronous_connection_failover_add_source(channel,
host, port, network_namespace, weight), weights 1-100, the highest tried first) and, with
SOURCE_CONNECTION_AUTO_FAILOVER=1 on a channel using GTID auto-positioning (SOURCE_AUTO_POSITION=1), connects to
the next source of that list once SOURCE_RETRY_COUNT attempts SOURCE_CONNECT_RETRY seconds apart have failed on
the current one. The statement is CHANGE MASTER TO in 8.0.22 (with the MASTER_* option names, and
SOURCE_CONNECTION_AUTO_FAILOVER) and CHANGE REPLICATION SOURCE TO from 8.0.23; START/STOP REPLICA exist from
8.0.22. network_namespace is reserved by MySQL: an empty string. (MySQL 8.0 Reference Manual: "Switching Sources
with Asynchronous Connection Failover", "Asynchronous Replication Channel Failover Functions", "CHANGE
REPLICATION SOURCE TO Statement".)

What MySQL does not do, the product still does: move the replica end, and fail back (its list is tried by
weight, but 8.0.22 never returns to a higher-weight source on its own).

Pure builders: each returns SQL rendered by `render(sql, params)`, the node's driver escaping (BackendClient.render)
so the plan shows the exact text. Written against the documented statements and unit-checked
(apps/dr/tests/test_native.py); never run against a real MySQL 8 here (none installs on this machine).
"""

import re
from collections.abc import Callable, Iterable

# A backend connection's statement renderer (BackendClient.render): SQL with %s and its parameters -> one statement.
Render = Callable[[str, tuple[object, ...]], str]

NATIVE_FROM = (8, 0, 22)
REPLICATION_SOURCE_FROM = (8, 0, 23)  # CHANGE REPLICATION SOURCE TO and the SOURCE_* option names
RETRY_COUNT = 3  # the manual's suggestion: a few tries on the same source for a network blip...
CONNECT_RETRY_S = 10  # ...10 s apart, then the next source of the list
DEFAULT_CHANNEL = ""  # the default replication channel, as the product's channels use it


def parse_version(version: str | None) -> tuple[str, tuple[int, ...]] | None:
    """'8.0.36-log' -> ('mysql', (8, 0, 36)); '10.11.6-MariaDB-log' -> ('mariadb', (10, 11, 6)); None if unknown."""
    match = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", version or "")
    if not match:
        return None
    flavor = "mariadb" if "mariadb" in match.string.lower() else "mysql"
    return flavor, tuple(int(x) for x in match.groups())


def has_native_failover(version: str | None) -> bool:
    """A MySQL (not MariaDB) server of 8.0.22 or later: it keeps its own source list per channel."""
    parsed = parse_version(version)
    return parsed is not None and parsed[0] == "mysql" and parsed[1] >= NATIVE_FROM


def _new_syntax(version: str | None) -> bool:
    parsed = parse_version(version)
    if parsed is None:  # callers plan this only for has_native_failover(version)
        raise ValueError(f"not a server version: {version!r}")
    return parsed[1] >= REPLICATION_SOURCE_FROM


def _for_channel(render: Render, channel: str) -> str:
    return render(" FOR CHANNEL %s", (channel,))


def stop_replica(render: Render, channel: str = DEFAULT_CHANNEL) -> str:
    return "STOP REPLICA" + _for_channel(render, channel)


def start_replica(render: Render, channel: str = DEFAULT_CHANNEL) -> str:
    return "START REPLICA" + _for_channel(render, channel)


def change_source(
    render: Render,
    version: str | None,
    *,
    host: str,
    port: int | str,
    user: str,
    password: object,  # the value, or a Secret (its marker)
    auto_failover: bool = True,
    channel: str = DEFAULT_CHANNEL,
    retry_count: int = RETRY_COUNT,
    connect_retry_s: int = CONNECT_RETRY_S,
) -> str:
    """The channel reads from host:port by GTID auto-positioning, with MySQL's source failover on or off.
    `password` is sent as given (a plan passes a Secret: its marker, filled in only when sent)."""
    if _new_syntax(version):
        names = (
            "CHANGE REPLICATION SOURCE TO",
            "SOURCE_HOST",
            "SOURCE_PORT",
            "SOURCE_USER",
            "SOURCE_PASSWORD",
            "SOURCE_AUTO_POSITION",
            "SOURCE_RETRY_COUNT",
            "SOURCE_CONNECT_RETRY",
        )
    else:  # 8.0.22: CHANGE MASTER TO, the MASTER_* names, and the one new option under its SOURCE_ name
        names = (
            "CHANGE MASTER TO",
            "MASTER_HOST",
            "MASTER_PORT",
            "MASTER_USER",
            "MASTER_PASSWORD",
            "MASTER_AUTO_POSITION",
            "MASTER_RETRY_COUNT",
            "MASTER_CONNECT_RETRY",
        )
    head, host_, port_, user_, password_, auto_, retries_, retry_ = names
    # one render for the whole statement: a plan records where in it the password sits
    return render(
        f"{head} {host_}=%s, {port_}=%s, {user_}=%s, {password_}=%s, {auto_}=1, "
        f"SOURCE_CONNECTION_AUTO_FAILOVER=%s, {retries_}=%s, {retry_}=%s FOR CHANNEL %s",
        (host, int(port), user, password, 1 if auto_failover else 0, int(retry_count), int(connect_retry_s), channel),
    )


def add_source(render: Render, *, host: str, port: int | str, weight: int | str, channel: str = DEFAULT_CHANNEL) -> str:
    """One source of the channel's list; weight 1-100 (the highest is tried first)."""
    if not 1 <= int(weight) <= 100:
        raise ValueError(f"a source's weight is 1 to 100, not {weight}")
    return render(
        "SELECT asynchronous_connection_failover_add_source(%s, %s, %s, %s, %s)",
        (channel, host, int(port), "", int(weight)),
    )


def delete_source(render: Render, *, host: str, port: int | str, channel: str = DEFAULT_CHANNEL) -> str:
    return render(
        "SELECT asynchronous_connection_failover_delete_source(%s, %s, %s, %s)", (channel, host, int(port), "")
    )


def configure(
    render: Render,
    version: str | None,
    *,
    source: tuple[str, int],
    candidates: Iterable[tuple[str, int | str, int | str]],
    user: str,
    password: object,
    previous: Iterable[tuple[str, int | str, int | str]] = (),
    was_on: bool = False,
    channel: str = DEFAULT_CHANNEL,
) -> tuple[list[str], list[str]]:
    """(statements, rollback) that give the replica the channel's source list and turn its failover on, reading
    from `source` now. `source`: (host, port); `candidates`: [(host, port, weight)] (weights clamped to MySQL's
    1-100); `previous`: the list it has now, [(host, port, weight)] (read_sources()), and `was_on` its
    SOURCE_CONNECTION_AUTO_FAILOVER: the rollback puts both back. A source whose weight changes is deleted and
    added again (add_source takes a new entry only)."""
    current = {(h, int(p)): int(w) for h, p, w in previous}
    wanted = {(h, int(p)): max(1, min(100, int(w))) for h, p, w in candidates}
    to_delete = [k for k in current if wanted.get(k) != current[k]]
    to_add = [k for k in wanted if current.get(k) != wanted[k]]

    def change(on: bool) -> str:
        return change_source(
            render,
            version,
            host=source[0],
            port=source[1],
            user=user,
            password=password,
            auto_failover=on,
            channel=channel,
        )

    sql = [stop_replica(render, channel), change(True)]
    sql += [delete_source(render, host=h, port=p, channel=channel) for h, p in to_delete]
    sql += [add_source(render, host=h, port=p, weight=wanted[(h, p)], channel=channel) for h, p in to_add]
    sql.append(start_replica(render, channel))
    rollback = [stop_replica(render, channel)]
    rollback += [delete_source(render, host=h, port=p, channel=channel) for h, p in to_add]
    rollback += [add_source(render, host=h, port=p, weight=current[(h, p)], channel=channel) for h, p in to_delete]
    rollback += [change(was_on), start_replica(render, channel)]
    return sql, rollback
