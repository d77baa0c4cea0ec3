"""Names reach file names, headers and file comments (issue 22): a cluster named with a quote and a header
parameter saved its export as another file; one with CR/LF broke the header. Django builds the header now, and
new names with control characters are refused."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.configuration import services
from apps.fleet.forms import AdoptForm
from apps.fleet.models import Cluster
from apps.fleet.validators import validate_name

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["a\r\nb", "tab\there", "nul\x00", "rtl\u202eoverride", "line\u2028sep"])
def test_control_characters_are_refused_in_a_cluster_name(name):
    with pytest.raises(ValidationError):
        validate_name(name)
    with pytest.raises(ValidationError):
        Cluster(name=name, writer_hostgroup=100, reader_hostgroup=101).full_clean()
    form = AdoptForm(
        data={
            "admin_host": "127.0.0.1",
            "admin_port": 6032,
            "admin_user": "admin",
            "node_name": "p1",
            "new_cluster_name": name,
        }
    )
    assert not form.is_valid() and "new_cluster_name" in form.errors


def test_ordinary_names_pass():
    for name in ("galera-lab", "prod eu/1", "München", "x\"; filename*=UTF-8''invoice.html; a=\""):
        validate_name(name)


def test_the_export_header_is_built_by_django_whatever_the_name(adopted_lab, operator_client):
    cluster, _ = adopted_lab
    version = services.latest(cluster)
    Cluster.objects.filter(pk=cluster.pk).update(name="x\"; filename*=UTF-8''invoice.html; a=\"")
    response = operator_client.get(reverse("configuration:export", args=[version.pk]))
    assert response.status_code == 200
    disposition = response["Content-Disposition"]
    # One quoted filename, its quotes escaped (RFC 6266): no second parameter for the browser to pick.
    assert disposition == 'attachment; filename="x\\"; filename*=UTF-8\'\'invoice.html; a=\\"-v1.yaml"'
    Cluster.objects.filter(pk=cluster.pk).update(name="old\r\nname")  # a name stored before names were checked
    response = operator_client.get(reverse("configuration:export", args=[version.pk]))
    assert response.status_code == 200 and "\n" not in response["Content-Disposition"]
    assert response.content.decode().splitlines()[0].startswith("# ProxySQL configuration of cluster old??name,")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_chromium_saves_the_export_under_the_cluster_s_name(
    page, live_server, browser_login, operator_user, adopted_lab
):
    cluster, _ = adopted_lab
    version = services.latest(cluster)
    Cluster.objects.filter(pk=cluster.pk).update(name="x\"; filename*=UTF-8''invoice.html; a=\"")
    browser_login(operator_user)
    page.set_content(
        f'<a id="export" href="{live_server.url}{reverse("configuration:export", args=[version.pk])}">e</a>'
    )
    with page.expect_download() as download:
        page.click("#export")
    assert download.value.suggested_filename != "invoice.html"
    assert download.value.suggested_filename.endswith("-v1.yaml")
