"""Mirrored copies marked when the poll stores them (issue 36): DigestStat.mirrored and DigestPoll.copy_rows, and the
rows already kept marked from the mirror rules as the polls last read them (fleet.MirrorRule), as the list did at each
request before."""

from django.db import migrations, models

CHUNK = 500


def mark_kept_rows(apps, schema_editor):
    # why: the app's code loads when this step runs, not each time migrate reads the migration graph
    from apps.monitoring import mirror

    MirrorRule = apps.get_model("fleet", "MirrorRule")
    Digest = apps.get_model("digests", "Digest")
    DigestPoll = apps.get_model("digests", "DigestPoll")
    DigestSource = apps.get_model("digests", "DigestSource")
    DigestStat = apps.get_model("digests", "DigestStat")
    rules = {}
    for rule in MirrorRule.objects.filter(active=True, mirror_hostgroup__isnull=False).order_by("rule_id"):
        rules.setdefault((rule.proxysql_node_id, rule.mirror_hostgroup), []).append(
            {"match_digest": rule.match_digest, "match_pattern": rule.match_pattern}
        )
    for (node_id, hostgroup), found in rules.items():
        for source in DigestSource.objects.filter(node_id=node_id, hostgroup=hostgroup):
            spent = mirror.Spent()
            matchers = [mirror.Matcher.of(r, spent) for r in found]
            ids = sorted(set(DigestStat.objects.filter(source_id=source.pk).values_list("digest_id", flat=True)))
            for i in range(0, len(ids), CHUNK):
                texts = Digest.objects.filter(pk__in=ids[i : i + CHUNK]).values_list("pk", "digest_text")
                copies = [
                    pk
                    for pk, text in texts
                    if any(m.matches(source.schemaname, source.username, text) for m in matchers)
                ]
                DigestStat.objects.filter(source_id=source.pk, digest_id__in=copies).update(mirrored=True)
            stamps = (
                DigestStat.objects.filter(source_id=source.pk, mirrored=True).values_list("resolution", "ts").distinct()
            )
            by_level = {}
            for resolution, ts in stamps:
                by_level.setdefault(resolution, []).append(ts)
            for resolution, times in by_level.items():  # at least one row of copies in each of these polls
                for i in range(0, len(times), CHUNK):
                    DigestPoll.objects.filter(
                        node_id=node_id, resolution=resolution, ts__in=times[i : i + CHUNK], copy_rows=0
                    ).update(copy_rows=1)


class Migration(migrations.Migration):
    dependencies = [
        ("digests", "0005_rows_sent_affected"),
        ("fleet", "0001_initial"),  # MirrorRule
    ]

    operations = [
        migrations.AddField(
            model_name="digeststat",
            name="mirrored",
            field=models.BooleanField(
                db_default=False,
                help_text="a mirror rule's copies (ProxySQL counts them under the original's digest in the mirror hostgroup), as the poll's mirror rules said (mirroring.mark_copies); NULL: not known (a pattern at PCRE's match limit, the poll's search budget)",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="digestpoll",
            name="copy_rows",
            field=models.IntegerField(
                db_default=0,
                help_text="of stat_rows, those that are or may be mirrored copies: a window without any keeps the list's span (selectors.top_digests)",
            ),
        ),
        migrations.RunPython(mark_kept_rows, migrations.RunPython.noop),
    ]
