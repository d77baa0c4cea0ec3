"""Query digest history: digest texts once, narrow interval rows at four resolutions.

stats_mysql_query_digest counters are cumulative; a poll stores the *delta* since the previous poll of
the same node, one DigestStat row per (source, digest) whose count changed. A source is where ProxySQL
saw the digest: node, hostgroup, schema, user, client address (few per node), so interval rows carry
two small integers instead of four strings, and filters by cluster / node / hostgroup / user / schema
become one subquery on the small DigestSource table.

resolution 0 = raw (one row per poll; ts = the poller's clock at the poll, never the node's), 300 =
5-minute rollup, 3600 = hourly, 86400 = daily (ts = the bucket's start, UTC). A row at ts t belongs to
the bucket containing t, so a window is answered from the coarsest complete buckets inside it and
finer rows at its edges (selectors.plan_window). Timestamps are integer epoch seconds: a quarter of
the width of a datetime in SQLite's indexes, and what the charts want anyway.

min_time / max_time are the interval's extremes where they can be derived from cumulative counters
(ProxySQL's max rose during the interval, its min fell, a single execution, or a digest first seen
in the interval); NULL where they cannot.
"""

from django.db import models

RAW, FIVE_MINUTES, HOUR, DAY = 0, 300, 3600, 86400
LEVELS = (FIVE_MINUTES, HOUR, DAY)  # rollup levels, finest first
RESOLUTIONS = (RAW,) + LEVELS


class SearchTextField(models.TextField):
    """A lower-case copy of a text, matched byte for byte: ascii_bin on MariaDB/MySQL, where a LIKE through the
    table's collation costs 3-5 times as much as a binary one (measured: docs/benchmarks.md). Plain elsewhere."""

    def db_type(self, connection):
        if connection.vendor == "mysql":
            return "longtext CHARACTER SET ascii COLLATE ascii_bin"
        return super().db_type(connection)


class Digest(models.Model):
    """One digest hash and its text, as ProxySQL normalised it (texts can be long: stored once)."""

    digest = models.CharField(max_length=18, unique=True, help_text="ProxySQL's hash, e.g. 0x695FBF255DBEB0DD")
    digest_text = models.TextField()
    first_polled_at = models.IntegerField(
        null=True, help_text="epoch seconds (poller clock) of the poll that first stored it"
    )
    words_indexed = models.BooleanField(
        db_default=False,
        db_index=True,
        help_text="its words are in DigestWordUse (search.py); until then a search reads its text",
    )
    search_text = SearchTextField(
        null=True,
        help_text="the text in lower case if it is printable ASCII, set with its"
        " words (search.py); NULL: a search matches digest_text through the collation",
    )

    def __str__(self):
        return f"{self.digest} {self.digest_text[:60]}"


class DigestWord(models.Model):
    """A word of the digest texts (a run of [a-z0-9_], lower case): the search index's vocabulary."""

    word = models.CharField(max_length=64, unique=True, help_text="'' marks texts the index cannot split (search.py)")


class DigestWordUse(models.Model):
    """Digest `digest` has the word `word`: a search finds the words holding its term, then their digests."""

    pk = models.CompositePrimaryKey("word", "digest")
    word = models.ForeignKey(
        DigestWord, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    digest = models.ForeignKey(Digest, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False)


class DigestSource(models.Model):
    """Where a digest ran: one ProxySQL node's (hostgroup, schema, user, client address)."""

    node = models.ForeignKey("fleet.ProxySQLNode", on_delete=models.CASCADE, related_name="+")
    hostgroup = models.PositiveIntegerField()
    schemaname = models.CharField(max_length=64, blank=True)
    username = models.CharField(max_length=80, blank=True)
    client_address = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["node", "hostgroup", "schemaname", "username", "client_address"], name="digestsource_unique"
            )
        ]


class DigestStat(models.Model):
    """Deltas of one digest at one source over one interval (raw) or bucket (rollups)."""

    pk = models.CompositePrimaryKey("resolution", "ts", "source", "digest")
    resolution = models.PositiveIntegerField()
    ts = models.IntegerField()
    source = models.ForeignKey(
        DigestSource, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    digest = models.ForeignKey(Digest, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False)
    count_star = models.BigIntegerField()
    sum_time = models.BigIntegerField(help_text="microseconds")
    min_time = models.BigIntegerField(null=True)
    max_time = models.BigIntegerField(null=True)
    rows_sent = models.BigIntegerField(null=True, help_text="sum_rows_sent's delta; NULL: not read then")
    rows_affected = models.BigIntegerField(null=True, help_text="sum_rows_affected's delta; NULL: not read then")
    mirrored = models.BooleanField(
        null=True,
        db_default=False,
        help_text="a mirror rule's copies (ProxySQL counts them under the original's digest"
        " in the mirror hostgroup), as the poll's mirror rules said (mirroring.mark_copies);"
        " NULL: not known (a pattern at PCRE's match limit, the poll's search budget)",
    )

    class Meta:
        indexes = [models.Index(fields=["digest", "resolution", "ts"], name="digeststat_digest_res_ts")]


class DigestPoll(models.Model):
    """Which polls of a node produced figures: tells a quiet digest (zero) from missing data (a gap)."""

    pk = models.CompositePrimaryKey("resolution", "ts", "node")
    resolution = models.PositiveIntegerField()
    ts = models.IntegerField()
    node = models.ForeignKey(
        "fleet.ProxySQLNode", on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    polls_ok = models.IntegerField(default=0, help_text="polls that produced deltas")
    polls_failed = models.IntegerField(default=0)
    stat_rows = models.IntegerField(default=0, help_text="DigestStat rows written")
    interval_s = models.FloatField(default=0, help_text="seconds of traffic the deltas cover (poll to poll)")
    copy_rows = models.IntegerField(
        db_default=0,
        help_text="of stat_rows, those that are or may be mirrored copies: a window without"
        " any keeps the list's span (selectors.top_digests)",
    )


class DigestNodeState(models.Model):
    """The latest digest poll of one node: its baseline, its age and its last error."""

    node = models.OneToOneField("fleet.ProxySQLNode", on_delete=models.CASCADE, primary_key=True, related_name="+")
    baseline_ts = models.FloatField(null=True, help_text="poller time of the counters kept in Redis as the baseline")
    last_poll_ts = models.FloatField(null=True)
    last_ok_ts = models.FloatField(null=True)
    digests = models.IntegerField(default=0, help_text="rows in stats_mysql_query_digest at the last good poll")
    changed = models.IntegerField(default=0, help_text="rows written by the last good poll")
    resets = models.IntegerField(default=0, help_text="counter resets or restarts seen at the last good poll")
    seconds = models.FloatField(default=0)
    error = models.TextField(blank=True)
    error_kind = models.CharField(max_length=20, blank=True)
    error_since = models.FloatField(null=True)


class DigestSpan(models.Model):
    """Per digest, its totals over all sources for the SPAN_HOURS complete hours before end_ts.

    Written once an hour (when the hourly rollup completes an hour) so that "last 24 hours" ranks
    digests without summing 24 hourly rows each: the window is this span plus two edges of about an
    hour, and a digest that did not run in the edges keeps its span figures, already sorted by an
    index (selectors.top_digests). Only for the unfiltered list; filters and searches sum the rows.
    """

    pk = models.CompositePrimaryKey("end_ts", "digest")
    end_ts = models.IntegerField()
    digest = models.ForeignKey(Digest, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False)
    count_star = models.BigIntegerField()
    sum_time = models.BigIntegerField()
    avg_time = models.FloatField(help_text="sum_time / count_star, stored to be indexed")
    max_time = models.BigIntegerField(null=True)
    min_time = models.BigIntegerField(null=True)

    class Meta:
        indexes = [
            models.Index(fields=["end_ts", "sum_time", "digest"], name="digestspan_total"),
            models.Index(fields=["end_ts", "count_star", "digest"], name="digestspan_count"),
            models.Index(fields=["end_ts", "avg_time", "digest"], name="digestspan_avg"),
            models.Index(fields=["end_ts", "max_time", "digest"], name="digestspan_max"),
        ]


SPAN_HOURS = 22  # in a 24 h window: edges of up to 2 h, room for the hourly rollup to lag
SPAN_S = SPAN_HOURS * HOUR
