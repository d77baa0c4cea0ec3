"""Hostile configuration files (issue 22): each refused with a clear message by every door (the loader, the
command), never a 500, a traceback, a huge change set or a stuck worker."""

import pytest
import yaml

from apps.configuration import files, services

from .test_files import command, edited

pytestmark = pytest.mark.django_db(transaction=True)


def alias_bomb(text, levels=7):
    """The probe's 12 KB file: a chain of anchors, each level nine aliases of the one before, ending in a row's
    comment (9**7 = 4.8 million strings once expanded)."""
    doc = yaml.safe_load(text)
    doc["mysql_servers"][0]["comment"] = "BOMB"
    body = yaml.safe_dump(doc, sort_keys=False).replace("comment: BOMB", f"comment: *l{levels - 1}")
    chain = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    chain += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(chain) + "\n" + body


def hostile_files(original):
    def first_server(**fields):
        return edited(original, lambda doc: doc["mysql_servers"][0].update(fields))

    def a_user(**fields):
        return edited(original, lambda doc: doc["mysql_users"].append({"username": "app", **fields}))

    return [
        (alias_bomb(original), "anchors and aliases (& and *) are not accepted"),
        ("cluster: x\nroles: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than 16 levels deep"),
        (
            first_server(weight=12345).replace("weight: 12345", "weight: " + "9" * 5000),
            "a number longer than 20 digits",
        ),
        (first_server(comment="BAD").replace("comment: BAD", 'comment: "\\ud800"'), "lone surrogate"),
        (a_user(password={"secret": [1, 2]}), "write a secret as {secret: <reference>}"),
        (first_server(comment={"secret": "x"}), "a {secret: ...} reference stands only for a password"),
        (edited(original, lambda doc: doc["roles"].update(writer=2**40)), "roles.writer must be a hostgroup number"),
        (
            edited(original, lambda doc: doc["global_variables"].update({"mysql-threads": {"a": 1}})),
            "global_variables mysql-threads: a value must be text or a number",
        ),
    ]


def test_hostile_files_are_refused_by_the_loader_and_the_command(adopted_lab, tmp_path):
    cluster, _ = adopted_lab
    original = files.export(services.latest(cluster))
    path = tmp_path / "f.yaml"
    for text, expected in hostile_files(original):
        with pytest.raises(files.FileError) as refused:
            files.read(text, cluster)
        assert expected in str(refused.value), (expected, str(refused.value)[:300])
        path.write_text(text)
        for action in ("diff", "plan"):
            code, out = command(action, cluster.name, str(path))
            assert code in (1, 2) and expected in out and "Traceback" not in out, (action, expected, out[:300])
    assert files.read(original, cluster)[1]  # the exported file itself still reads


def test_row_and_size_limits_are_refused_plainly(adopted_lab):
    cluster, _ = adopted_lab
    original = files.export(services.latest(cluster))
    rows = edited(
        original, lambda doc: doc.update(mysql_query_rules=[{"rule_id": i} for i in range(1, files.MAX_ROWS + 2)])
    )
    with pytest.raises(files.FileError, match="mysql_query_rules has 20,001 rows, more than 20,000"):
        files.read(rows, cluster)
    with pytest.raises(files.FileError, match="characters, more than 5,242,880"):
        files.read(original + "#" * files.MAX_FILE_CHARS, cluster)
