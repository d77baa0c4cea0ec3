"""A configuration file's import costs work linear in its rows (issue 22: 10,000 query rules took 79 s; each edit
applied re-indexed its table, and every query rule was compared with every earlier one). Counted, never timed:
the Python function calls and the database queries of the import as the upload and `config apply` run it
(parse, validate, diff, change set, plan saved), for N and 2N query rules. The time is the benchmark's
(lab/bench_config_file.py, docs/benchmarks.md)."""

import cProfile
import pstats

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.audit.actor import Actor
from apps.configuration import files, services
from apps.configuration import change_set

from .test_files import edited

pytestmark = pytest.mark.django_db(transaction=True)


def with_rules(text, n):
    """The file with n query rules of one user, none shadowing another (a literal start is no pure prefix)."""
    rules = [
        {
            "rule_id": k,
            "active": 1,
            "username": "app",
            "match_digest": f"^SELECT .* FROM t{k}\\b",
            "destination_hostgroup": 101,
            "apply": 1,
        }
        for k in range(1, n + 1)
    ]
    return edited(text, lambda doc: doc.update(mysql_query_rules=rules))


def counted_import(cluster, text, user):
    """(Python function calls, database queries) of importing the file up to its saved plan."""
    profile = cProfile.Profile()
    with CaptureQueriesContext(connection) as queries:
        profile.enable()
        cs = services.start_from_file(cluster, text, actor=Actor.command(user), reason="scale")
        change_set.plan_and_save(cs, actor=Actor.command(user))
        profile.disable()
    return pstats.Stats(profile).total_calls, len(queries)


def test_importing_twice_the_rules_costs_twice_the_work_and_the_same_queries(adopted_lab, operator_user):
    cluster, _ = adopted_lab
    original = files.export(services.latest(cluster))
    counted_import(cluster, with_rules(original, 10), operator_user)  # first-use costs (imports, caches) paid
    calls, queries = counted_import(cluster, with_rules(original, 200), operator_user)
    calls_2n, queries_2n = counted_import(cluster, with_rules(original, 400), operator_user)
    assert calls_2n < 2.2 * calls, (calls, calls_2n)
    assert queries_2n == queries, (queries, queries_2n)
