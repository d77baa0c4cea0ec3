"""Who acts, and through which door: the one argument a service takes to know it (never Django's request), so
the same service serves the pages, the API, the command line, schedules and automatic rules, and its audit row
says which (AuditEvent.actor_kind is the door; actor names the person, token, rule or schedule).

    Actor.of_request(request)   a page (or the API, when the request came through it: DRF's Request)
    Actor.command(user)         manage.py, on --user NAME's word
    Actor.of_operation(op)      an operation's planner, for what its worker records in its name
    Actor.schedule("report schedule #3"), Actor.rule("failover"), Actor.system()
"""

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest

from controlplane.client_address import client_address

from .models import ActorKind


@dataclass(frozen=True)
class Actor:
    kind: str  # ActorKind: the door
    user: Any = None  # the Django user, when a person acts
    token: str = ""  # the API token's name, when the request carried one
    address: str | None = None  # the client's address (controlplane/client_address.py)
    label: str = ""  # a rule's or a schedule's name

    @classmethod
    def of_request(cls, request: HttpRequest) -> "Actor":
        user = request.user if request.user.is_authenticated else None
        auth = getattr(request, "auth", None)  # DRF's: an accounts.ApiToken when a bearer token signed the request in
        token = auth.name if auth is not None else ""  # (None for a session; Django's own request has none)
        # DRF's Request wraps Django's (._request): the API door, whether a token or the session signed it in.
        kind = ActorKind.API if (token or hasattr(request, "_request")) else ActorKind.USER
        return cls(kind, user=user, token=token, address=client_address(request))

    @classmethod
    def command(cls, user: Any = None, label: str = "") -> "Actor":
        """manage.py: on --user NAME's word, or a command that names no console user (`label`, e.g. adopt_proxysql
        with the ProxySQL admin account it read with)."""
        return cls(ActorKind.COMMAND, user=user, label=label)

    @classmethod
    def of_operation(cls, op: Any) -> "Actor":  # an operations.Operation (an app above: not imported)
        """An operation's planner, in whose name its worker records what follows from it (its configuration version,
        a finish): the person, or the rule that planned it (or the name as written when the account is gone)."""
        return cls(ActorKind.USER, user=op.requested_by) if op.requested_by_id else cls.rule(op.actor)

    @classmethod
    def schedule(cls, label: str) -> "Actor":
        return cls(ActorKind.SCHEDULE, label=label)

    @classmethod
    def rule(cls, label: str) -> "Actor":
        return cls(ActorKind.RULE, label=label)

    @classmethod
    def system(cls) -> "Actor":
        return cls(ActorKind.SYSTEM)

    @property
    def name(self) -> str:
        """As the audit log and a record's author field show it: "alice", "alice (token ci-runner)", the rule's or
        schedule's name, "anonymous" (a request with no user: a refused login), or "system"."""
        if self.user is not None:
            return self.user.get_username() + (f" (token {self.token})" if self.token else "")
        if self.label:
            return self.label
        return "anonymous" if self.kind in (ActorKind.USER, ActorKind.API) else "system"

    @property
    def who(self) -> str:
        """The name an operation keeps as its planner or confirmer: the person's (without the token), or the
        rule's or schedule's, or "system"."""
        return self.user.get_username() if self.user is not None else self.name

    @property
    def is_rule(self) -> bool:
        return self.kind == ActorKind.RULE
