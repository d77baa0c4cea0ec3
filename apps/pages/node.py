"""The ProxySQL node page's context: monitoring's live state with digests' mirror rules (the digest poll
measures them), for the page (apps/pages/views.py) and its live partials (apps/monitoring/views.py)."""

import time

from apps.digests.selectors import mirror_rules
from apps.monitoring import status
from apps.monitoring.selectors import proxysql_live


def proxysql_context(node, now=None):
    now = now or time.time()
    return {**proxysql_live(node, now), **mirror_rules(node, now), "stale_factor": status.STALE_FACTOR}
