"""Reads of operations that the pages and the API share: one filter, two doors (the operations list page and
GET /api/v1/operations/ answer the same rows for the same filter)."""
from .models import Operation


def operations(*, cluster=None, kind="", state=""):
    """Operations newest first, narrowed to a cluster (its id), a kind and a state when given. The doors check the
    values first (the page ignores one it does not understand, the API refuses it)."""
    ops = Operation.objects.order_by("-id")
    if cluster is not None:
        ops = ops.filter(cluster_id=cluster)
    if kind:
        ops = ops.filter(kind=kind)
    if state:
        ops = ops.filter(state=state)
    return ops
