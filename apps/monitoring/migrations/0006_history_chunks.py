"""History chunks (apps/monitoring/chunks.py): every ProxySQL node's rows that the rollups have already read
become one HistoryChunk row per node and span, as the rollup task does from now on. Reversible: chunks
are expanded back into rows."""
import django.db.models.deletion
from django.db import migrations, models


def _tables(apps):
    from apps.monitoring.chunks import Tables

    get = apps.get_model
    return Tables(get("monitoring", "ProxySQLSample"), get("monitoring", "PoolSnapshot"),
                  get("monitoring", "HistoryChunk"), get("monitoring", "RollupMark"))


def rows_to_chunks(apps, schema_editor):
    from apps.monitoring.chunks import compact

    compact(tables=_tables(apps), max_spans=10 ** 9)


def chunks_to_rows(apps, schema_editor):
    from apps.monitoring.chunks import NODE_FIELDS_V1, decode

    t = _tables(apps)
    for chunk in t.chunk.objects.order_by("pk").iterator(chunk_size=100):
        nodes, pools = [], []
        for ts, figures, servers in decode(chunk.ts, chunk.data):
            where = {"node_id": chunk.node_id, "ts": ts, "resolution": chunk.resolution}
            if figures is not None:
                nodes.append(t.node(**where, reachable=figures[0], **dict(zip(NODE_FIELDS_V1, figures[1:]))))
            if servers is not None:
                pools.append(t.pool(**where, servers=servers))
        t.node.objects.bulk_create(nodes, batch_size=1000)
        t.pool.objects.bulk_create(pools, batch_size=1000)
    t.chunk.objects.all().delete()


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0007_backend_poll_and_failover_defaults'),
        ('monitoring', '0005_float32_figures'),
    ]

    operations = [
        migrations.CreateModel(
            name='HistoryChunk',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('resolution', models.PositiveSmallIntegerField()),
                ('ts', models.DateTimeField(help_text='start of the span')),
                ('data', models.BinaryField()),
                ('node', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='fleet.proxysqlnode')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('node', 'resolution', 'ts'), name='historychunk_node_res_ts')],
            },
        ),
        migrations.RunPython(rows_to_chunks, chunks_to_rows),
    ]
