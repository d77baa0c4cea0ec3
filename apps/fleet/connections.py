"""A cluster's connection settings, set by an admin on the cluster page or the API: where its stored credentials may
go (credential_hosts, apps/clients/credential_hosts.py) and the TLS of every connection to its backends and ProxySQL
admin ports (tls_ca, tls_verify; apps/clients/wire.py). Audited with what changed; a CA by its certificates' subjects
and fingerprints (the audit log stays short and readable)."""

from cryptography.hazmat.primitives import hashes
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.audit.services import record

from .models import Cluster
from .validators import tls_ca_certificates

FIELDS = ("credential_hosts", "tls_ca", "tls_verify")
ACTION = "cluster connections changed"


def describe_ca(pem):
    """The CA as the audit and the page show it: each certificate's subject and SHA-256 fingerprint."""
    if not pem:
        return "none"
    try:
        certificates = tls_ca_certificates(pem)
    except ValidationError:  # not through the form (a direct database edit): said, not a 500
        return "unreadable (not PEM certificates)"
    return "; ".join(
        f"{c.subject.rfc4514_string()} (SHA-256 {c.fingerprint(hashes.SHA256()).hex(':')[:47]}…)" for c in certificates
    )


def _shown(values):
    return {**values, "tls_ca": describe_ca(values["tls_ca"])}


def current(cluster):
    return {f: getattr(cluster, f) for f in FIELDS}


def refused(cluster, errors, *, actor):
    """Settings that could not be used: audited as invalid (nothing changed)."""
    record(ACTION, actor=actor, cluster=cluster, target=cluster.name, outcome="invalid", details={"errors": errors})


def save(cluster, values, *, actor):
    """Write the settings that differ (`values`: checked by ConnectionsForm); audited in the same transaction.
    Returns the names of the fields that changed."""
    before = current(cluster)
    changed = [f for f in FIELDS if values[f] != before[f]]
    if not changed:
        return []
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(**{f: values[f] for f in changed}, updated_at=timezone.now())
        record(
            ACTION,
            actor=actor,
            cluster=cluster,
            target=cluster.name,
            details={"changed": changed, "before": _shown(before), "after": _shown({**before, **values})},
        )
    for f in changed:
        setattr(cluster, f, values[f])
    return changed
