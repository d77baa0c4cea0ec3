"""A real audit outage for tests: the database itself refuses to insert audit events of the chosen actions (a
trigger on the audit table, SQLite or MariaDB), as an unwritable audit table would, wherever record() is called
from. Use the audit_outage fixture: it runs the test with transaction=True (MariaDB commits implicitly around
CREATE TRIGGER) and drops the trigger after the test, failed or not."""

import pytest
from django.db import connection

from apps.audit.models import AuditEvent

TRIGGER = "test_audit_refused"
MESSAGE = "the audit log does not answer"


def _quoted(actions):
    return ", ".join("'" + a.replace("'", "''") + "'" for a in actions)


def refuse(*actions):
    """From now on, inserting an audit event whose action is one of `actions` fails in the database."""
    table = AuditEvent._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
        if connection.vendor == "sqlite":
            cur.execute(
                f"CREATE TRIGGER {TRIGGER} BEFORE INSERT ON {table} WHEN NEW.action IN ({_quoted(actions)}) "
                f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
            )
        else:
            cur.execute(
                f"CREATE TRIGGER {TRIGGER} BEFORE INSERT ON {table} FOR EACH ROW BEGIN "
                f"IF NEW.action IN ({_quoted(actions)}) THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = "
                f"'{MESSAGE}'; END IF; END"
            )


def answer():
    """The audit log answers again."""
    with connection.cursor() as cur:
        cur.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")


@pytest.fixture
def audit_outage(transactional_db):
    """audit_outage("action", ...) makes those actions' audit inserts fail; the trigger is gone after the test
    whatever happened (faults.answer() ends the outage earlier)."""
    yield refuse
    answer()
