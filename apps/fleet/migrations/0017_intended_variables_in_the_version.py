"""Issue 35 item 3: the variables operations change for a while live in the configuration version (configuration's
0002 moved the values recorded on the nodes into it); the node's copy goes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0016_cluster_tls_ca_and_verify"),
        ("configuration", "0002_every_cluster_has_a_version"),
    ]

    operations = [
        migrations.RemoveField(model_name="proxysqlnode", name="intended_variables"),
    ]
