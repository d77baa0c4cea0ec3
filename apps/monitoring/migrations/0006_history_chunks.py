"""History chunks (apps/monitoring/chunks.py): the tables only. The rows already stored become chunks through the
rollup task's bounded compaction (oldest spans first, a few hundred owners a minute), not here: converting a
big fleet's whole history in the migration would take hours (90-180 us a node record) and hold the upgrade.
Readers read rows and chunks alike meanwhile. Reversible: chunks are expanded back into rows."""

import django.db.models.deletion
from django.db import migrations, models


def _families(apps):
    # why: the app's code loads when this step runs, not each time migrate reads the migration graph
    from apps.monitoring import chunks

    get = apps.get_model
    mark = get("monitoring", "RollupMark")
    return (
        chunks.proxysql(
            get("monitoring", "ProxySQLSample"),
            get("monitoring", "HistoryChunk"),
            get("monitoring", "PoolSnapshot"),
            mark,
        ),
        chunks.backend(get("monitoring", "BackendSample"), get("monitoring", "BackendChunk"), mark),
    )


def chunks_to_rows(apps, schema_editor):
    # why: the app's code loads when this step runs, not each time migrate reads the migration graph
    from apps.monitoring.chunks import decode

    for family in _families(apps):
        for chunk in family.chunk.objects.order_by("pk").iterator(chunk_size=100):
            owner_id = getattr(chunk, family.owner)
            samples, snapshots = [], []
            for ts, figures, servers in decode(chunk.ts, chunk.data, family):
                where = {family.owner: owner_id, "ts": ts, "resolution": chunk.resolution}
                if figures is not None:
                    samples.append(
                        family.sample(**where, reachable=figures[0], **dict(zip(family.fields, figures[1:])))
                    )
                if servers is not None:
                    snapshots.append(family.pool(**where, servers=servers))
            family.sample.objects.bulk_create(samples, batch_size=1000)
            if snapshots:
                family.pool.objects.bulk_create(snapshots, batch_size=1000)
        family.chunk.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0007_backend_poll_and_failover_defaults"),
        ("monitoring", "0005_float32_figures"),
    ]

    operations = [
        migrations.CreateModel(
            name="BackendChunk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("resolution", models.PositiveSmallIntegerField()),
                ("ts", models.DateTimeField(help_text="start of the span")),
                ("data", models.BinaryField()),
                (
                    "server",
                    models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="fleet.server"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("server", "resolution", "ts"), name="backendchunk_srv_res_ts")
                ],
            },
        ),
        migrations.CreateModel(
            name="HistoryChunk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("resolution", models.PositiveSmallIntegerField()),
                ("ts", models.DateTimeField(help_text="start of the span")),
                ("data", models.BinaryField()),
                (
                    "node",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="fleet.proxysqlnode",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("node", "resolution", "ts"), name="historychunk_node_res_ts")
                ],
            },
        ),
        migrations.RunPython(migrations.RunPython.noop, chunks_to_rows),
    ]
