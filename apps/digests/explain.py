"""EXPLAIN of a digest's example query on a backend the digest is routed to (operators only, audited).

Who runs it: the cluster's EXPLAIN user (Cluster.explain_user), a backend user of its own. Never the application's
(its rights are the application's, and the console must not act as it) and never the monitor user: ProxySQL's monitor
and the console's operations use it with SUPER, READ_ONLY ADMIN... (the lab grants it that); a user that exists to
read is the only one that cannot change data whatever is sent. Before each EXPLAIN its grants are read (SHOW GRANTS):
any privilege beyond reading refuses it.

What is run: one statement, a SELECT (sqlparse splits and types it: Django's own SQL parser), in a READ ONLY
transaction, as `SET STATEMENT max_statement_time=N FOR EXPLAIN ...` (MariaDB) with the client's read deadline a
second later (apps/clients/backend.py owns every timeout). Refused, with the reason, otherwise: not a SELECT, no
example, several statements, placeholders (a prepared statement's text has no values), no EXPLAIN user, a backend
outside the cluster's credential hosts.

Where: the backend the example ran on (the processlist's srv_host:srv_port), if it is one of the cluster's servers;
else an ONLINE server of the hostgroup it ran in.
"""

from dataclasses import dataclass, field

import redis
import sqlparse

from apps.audit import services as audit
from apps.audit.actor import Actor
from apps.clients.backend import BackendClient
from apps.clients.credential_hosts import credentials_allowed
from apps.clients.wire import ClientError, Row
from apps.configuration import services as config_services
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.monitoring import live

from . import examples as examples_mod
from .examples import Example
from .models import Digest

LIMIT_S = 2.0  # max_statement_time: an EXPLAIN that needs longer (a derived table it must run) is cut by the server
SHOWN_ROWS = 200


class Refused(Exception):
    """Not run, and why (said to the operator and audited)."""


@dataclass
class Explained:
    refused: str = ""
    server: str = ""
    hostgroup: int | None = None
    user: str = ""
    limit_s: float = LIMIT_S
    columns: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


def check_statement(text: str | None) -> str:
    """The statement to EXPLAIN, or Refused: exactly one statement, a SELECT, with values (no placeholders)."""
    statements = [s for s in sqlparse.parse(text or "") if s.value.strip().strip(";").strip()]
    if not statements:
        raise Refused("the example is empty")
    if len(statements) > 1:
        raise Refused(f"the example holds {len(statements)} statements: EXPLAIN runs on one")
    statement = statements[0]
    kind = statement.get_type()
    if kind != "SELECT":
        raise Refused(
            f"the example is not a SELECT ({kind.lower() if kind != 'UNKNOWN' else 'unknown'}"
            " statement): only a SELECT is explained"
        )
    if any(t.ttype is sqlparse.tokens.Keyword and t.normalized == "INTO" for t in statement.flatten()):
        raise Refused("the SELECT writes (SELECT ... INTO): only a plain SELECT is explained")
    if any(t.ttype is sqlparse.tokens.Name.Placeholder for t in statement.flatten()):
        raise Refused("the example has placeholders (a prepared statement's text): no values to EXPLAIN it with")
    return str(statement).strip().rstrip(";").strip()


def _server(cluster: Cluster, example: Example) -> Server:
    """The fleet.Server to EXPLAIN on (see the module's docstring), or Refused."""
    ran_on = example.get("server")
    if ran_on:
        host, port = ran_on
        server = Server.objects.filter(cluster=cluster, hostname=host, port=port).first()
        if server is not None:
            return server
    membership = (
        HostgroupMembership.objects.filter(
            server__cluster=cluster, hostgroup_id=example["hostgroup"], status="ONLINE", server__maintenance=False
        )
        .select_related("server")
        .order_by("server__hostname", "server__port")
        .first()
    )
    if membership is None:
        raise Refused(f"no ONLINE server of hostgroup {example['hostgroup']} in {cluster.name}")
    return membership.server


def _check_user(cluster: Cluster) -> None:
    if not cluster.explain_user:
        raise Refused(
            f"{cluster.name} has no EXPLAIN user: an admin sets a dedicated read-only backend user"
            " (SELECT only) in the cluster's settings"
        )
    if cluster.explain_user == cluster.monitor_user:
        raise Refused(
            f"{cluster.name}'s EXPLAIN user is its monitor user, which has write privileges:"
            " set a dedicated read-only user"
        )
    version = config_services.latest(cluster)
    users = (version.content.get("mysql_users") or []) if version else []
    if any(u.get("username") == cluster.explain_user for u in users):
        raise Refused(
            f"{cluster.name}'s EXPLAIN user {cluster.explain_user!r} is an application user (mysql_users):"
            " set a dedicated read-only user"
        )


def explain(digest: Digest, example_index: int, *, cluster_id: int | None = None, actor: Actor) -> Explained:
    """EXPLAIN the digest's example number `example_index` (analysis.examples' order). Returns Explained (its
    `refused` says why when it was not run). Audited either way, after the backend answered (no transaction open)."""
    outcome = Explained()
    cluster: Cluster | None = None
    try:
        try:
            found = examples_mod.of_digest(live.client(), digest.digest_text, cluster_id)
        except redis.RedisError as exc:
            raise Refused(f"the examples cannot be read now ({exc})") from None
        if not 0 <= example_index < len(found):
            raise Refused("no example query of this digest is kept (any more): EXPLAIN needs one")
        example = found[example_index]
        sql = check_statement(example["text"])
        cluster = Cluster.objects.filter(pk=example["cluster"]).first()
        if cluster is None:
            raise Refused("the example's cluster is gone")
        _check_user(cluster)
        server = _server(cluster, example)
        allowed, reason = credentials_allowed(cluster, server.hostname, server.port)
        if not allowed:
            raise Refused(reason)
        outcome.server, outcome.hostgroup, outcome.user = (
            f"{server.hostname}:{server.port}",
            example["hostgroup"],
            cluster.explain_user,
        )
        with BackendClient(
            server.hostname,
            server.port,
            cluster.explain_user,
            cluster.explain_password,
            name=f"backend {server.hostname}:{server.port}",
            read_timeout=LIMIT_S + 1,
        ) as client:
            beyond = client.write_privileges()
            if beyond:
                raise Refused(
                    f"the EXPLAIN user {cluster.explain_user!r} is not read-only on {outcome.server}:"
                    f" {', '.join(beyond[:5])}"
                )
            outcome.columns, rows = client.explain(sql, example.get("schema") or "", LIMIT_S)
            outcome.rows = rows[:SHOWN_ROWS]
    except Refused as exc:
        outcome.refused = str(exc)
    except ClientError as exc:
        outcome.refused = f"the backend answered with an error: {exc}"
    audit.record(
        "digests.explain",
        outcome="refused" if outcome.refused else "success",
        actor=actor,
        cluster=cluster,
        target=digest.digest,
        details={
            "example": example_index,
            "server": outcome.server,
            "refused": outcome.refused,
            "rows": len(outcome.rows),
        },
    )
    return outcome
