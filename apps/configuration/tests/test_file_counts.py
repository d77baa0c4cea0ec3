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
