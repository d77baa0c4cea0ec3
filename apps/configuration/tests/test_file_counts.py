"""Issue 34: a 4 MB file of 200,000 variables tied a web worker 5-7 s before it was refused. Refused on its count
of values before anything is built (and on its size before it is read), at every door."""

import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from apps.configuration import files
from apps.fleet.models import Cluster


def many_variables(count=200_000):
    return "cluster: c\nglobal_variables:\n" + "".join(f"  mysql-v{i:06d}: '{i}'\n" for i in range(count))


def test_a_file_of_200000_variables_is_refused_on_its_count_before_it_is_built():
    text = many_variables()
    assert 4_000_000 < len(text) < files.MAX_FILE_CHARS
    started = time.monotonic()
    with pytest.raises(files.FileError, match="more than 100,000 values"):
        files.load(text)
    assert time.monotonic() - started < 1.5


@pytest.mark.django_db
def test_the_upload_refuses_it_and_says_why(client, operator_user):
    cluster = Cluster.objects.create(name="c", writer_hostgroup=10, reader_hostgroup=20)
    client.force_login(operator_user)
    upload = SimpleUploadedFile("c.yaml", many_variables().encode())
    response = client.post(reverse("configuration:upload", args=[cluster.pk]), {"file": upload, "reason": "probe"})
    assert response.status_code == 200 and "more than 100,000 values" in response.content.decode()  # the form again
    too_big = SimpleUploadedFile("c.yaml", b"#" * (files.MAX_FILE_CHARS + 1))
    response = client.post(reverse("configuration:upload", args=[cluster.pk]), {"file": too_big, "reason": "probe"})
    assert response.status_code == 400 and "larger than 5 MB" in response.content.decode()


@pytest.mark.django_db
def test_a_draft_takes_no_edit_past_the_most_one_may_hold(operator_user):
    """Each edit added through the editor replays every edit before it: 60,000 edits cost 0.74 s of CPU a request
    and growing. A draft holds at most MAX_EDITS (the API's own limit per request), and says so."""
    from apps.audit.actor import Actor
    from apps.configuration import content, services
    from apps.configuration.models import ChangeSet, ConfigVersion

    cluster = Cluster.objects.create(name="c", writer_hostgroup=10, reader_hostgroup=20)
    base = ConfigVersion.objects.create(
        cluster=cluster, number=1, author="x", reason="r", source="adopt", content=content.empty()
    )
    actor = Actor.command(operator_user)
    full = [
        {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": str(i + 1)}
        for i in range(services.MAX_EDITS)
    ]
    cs = ChangeSet.objects.create(cluster=cluster, base=base, author=operator_user, author_name="o", edits=full)
    with pytest.raises(services.Refused, match="5,000 edits, the most one may hold"):
        services.add_edit(
            cs, {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "1"}, actor=actor
        )
    cs.refresh_from_db()
    assert len(cs.edits) == services.MAX_EDITS  # nothing lost, nothing added
    cs.edits = full[:-1]
    cs.save()
    services.add_edit(
        cs, {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "2"}, actor=actor
    )
    assert len(ChangeSet.objects.get(pk=cs.pk).edits) == services.MAX_EDITS
