"""Every YAML path (issue 22) with the hostile shapes: the loader, the upload form, the API's file, and
`manage.py config diff` / `plan`, given files nested deep, with aliases, lone surrogates, huge numbers, lists and
mappings where text is expected, and control characters. A refusal or a change set, never a 500 or a traceback;
and a file the loader refuses saves nothing anywhere."""

import io
import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from apps.accounts import tokens
from apps.accounts.tests.hostile import hostile_text
from apps.api.tests.conftest import ApiClient
from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import files, services
from apps.configuration.models import ChangeSet
from apps.configuration.tables import BY_NAME, typed_row
from apps.fleet.models import Cluster
from apps.operations.models import Operation

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = [
    "cluster",
    "version",
    "roles",
    "hostgroups",
    "mysql_servers",
    "mysql_users",
    "mysql_query_rules",
    "scheduler",
    "global_variables",
]
COLUMNS = ["hostgroup_id", "hostname", "port", "status", "weight", "comment", "password", "rule_id", "match_digest"]
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True),
    hostile_text.filter(lambda t: len(t) < 5_000),
    st.text(alphabet=st.characters(max_codepoint=0x9F), max_size=6),
)
odd = st.recursive(
    scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
# Changes to the parsed document: a top-level key, or a column of the first row of a table, becomes `odd`.
doc_change = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.sampled_from(COLUMNS)), odd)
# Changes to the text: deep nesting, an alias chain, an escape of a lone surrogate or a control character, a huge number.
text_change = st.one_of(
    st.integers(min_value=2, max_value=6000).map(lambda n: ("nest", n)),
    st.integers(min_value=1, max_value=8).map(lambda n: ("alias", n)),
    st.sampled_from(
        ["\\ud800", "\\udfff\\ud800", "\\x00", "\\x1b[31m", "\\x85", "\\u202e", "\\U0010FFFF", "\\UFFFFFFFF"]
    ).map(lambda e: ("escape", e)),
    st.integers(min_value=21, max_value=6000).map(lambda n: ("digits", n)),
)


def mutate(original, doc_changes, text_changes):
    doc = yaml.safe_load(original)
    for key, column, value in doc_changes:
        if column and isinstance(doc.get(key), list) and doc[key] and isinstance(doc[key][0], dict):
            doc[key][0][column] = value
        else:
            doc[key] = value
    try:
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, UnicodeEncodeError):
        text = original
    for kind, arg in text_changes:
        if kind == "nest":
            text += f"\nextra: {'[' * arg}1{']' * arg}\n"
        elif kind == "alias":
            chain = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
            chain += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, arg)]
            text = "\n".join(chain) + "\n" + text + f"\nbomb: *l{arg - 1}\n"
        elif kind == "escape":
            text += f'\ncomment: "{arg}"\n'
        else:
            text += f"\nweight: {'9' * arg}\n"
    return text


@pytest.fixture
def versioned(db):
    """A cluster with a configuration version (no ProxySQL node: planning reads nothing), and its exported file."""
    cluster = Cluster.objects.create(name="fuzz", writer_hostgroup=100, reader_hostgroup=101)
    content = {
        **C.empty(),
        "roles": {"writer": 100, "reader": 101},
        "hostgroups": [100, 101],
        "mysql_servers": [
            typed_row(
                BY_NAME["mysql_servers"],
                {"hostgroup_id": 100, "hostname": "10.0.0.1", "port": 3306, "comment": "w"},
                strict=False,
            )
        ],
        "mysql_query_rules": [
            typed_row(
                BY_NAME["mysql_query_rules"], {"rule_id": 1, "active": 1, "match_digest": "^SELECT"}, strict=False
            )
        ],
    }
    version = services.record_version(cluster, content, actor=Actor.system(), reason="fuzz", source="adopt")
    return cluster, files.export(version)


@pytest.fixture
def admin_api(admin_user_role):
    return ApiClient(tokens.create(admin_user_role, "fuzz")[1])


def saved():
    return ChangeSet.objects.count(), Operation.objects.count()


def command(*args):
    out = io.StringIO()
    try:
        call_command("config", *args, stdout=out, stderr=out)
    except SystemExit as exit_:
        return exit_.code, out.getvalue()
    return 0, out.getvalue()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@example(doc_changes=[("roles", None, {"writer": 10**30})], text_changes=[])
@example(doc_changes=[("mysql_servers", "comment", {"secret": [1, 2]})], text_changes=[("escape", "\\ud800")])
@example(doc_changes=[], text_changes=[("alias", 8)])
@example(doc_changes=[], text_changes=[("nest", 3000)])
@example(doc_changes=[], text_changes=[("digits", 5000)])
@example(doc_changes=[("mysql_users", None, [{"username": "u", "password": {"secret": {"a": 1}}}])], text_changes=[])
@given(doc_changes=st.lists(doc_change, max_size=3), text_changes=st.lists(text_change, max_size=2))
def test_no_yaml_path_fails_or_saves_on_a_hostile_file(
    versioned, admin_user_role, admin_api, client, settings, tmp_path, doc_changes, text_changes
):
    settings.API_THROTTLE_RATES = {"read": "1000000/min", "write": "1000000/min"}
    cluster, original = versioned
    text = mutate(original, doc_changes, text_changes)
    try:
        files.read(text, cluster)
        refused = False
    except files.FileError:
        refused = True
    before = saved()

    client.force_login(admin_user_role)
    client.raise_request_exception = False
    upload = SimpleUploadedFile("f.yaml", text.encode("utf-8", "surrogatepass"), content_type="application/yaml")
    response = client.post(reverse("configuration:upload", args=[cluster.pk]), {"file": upload, "reason": "fuzz"})
    assert response.status_code < 500, (response.status_code, text[:300])

    answer = admin_api.post(f"/api/v1/clusters/{cluster.pk}/config/change-sets/", {"reason": "fuzz", "file": text})
    assert answer.status_code < 500, (answer.status_code, answer.content[:300], text[:300])
    if answer.status_code >= 400:
        assert set(answer.json()) == {"error"}, answer.content[:300]

    path = tmp_path / "f.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    for action in ("diff", "plan"):
        code, out = command(action, cluster.name, str(path))
        assert code in (0, 1, 2) and "Traceback" not in out, (action, code, out[:300])
    if refused:
        assert saved() == before, json.dumps(text[:300])
