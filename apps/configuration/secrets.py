"""Named secrets of a cluster's configuration (users' password hashes, password variables).

A configuration or a plan holds only a reference; the value is a ConfigSecret, encrypted at rest with
CREDENTIALS_KEYS like every other credential. A new value gets a new reference (`name#<8 hex>`), so an old
version keeps naming the value it was applied with and a revert restores it.
"""

import hashlib
import secrets as random

from apps.clients.secret_refs import SECRET_REF, Secret

from .models import ConfigSecret


SAFE_MAX = 200  # ConfigSecret.ref holds 300 characters: a table's prefix and "#<8 hex>" fit beside this


def safe(text):
    """A name usable in a secret reference (markers allow [A-Za-z0-9_/#.@:-] only), at most SAFE_MAX characters
    (a longer name, a user's of 10,000 characters, is named by its digest)."""
    name = text if SECRET_REF.fullmatch(text or "-") and "#" not in text else "x" + text.encode().hex()
    return name if len(name) <= SAFE_MAX else "h" + hashlib.sha256(text.encode()).hexdigest()


def new_ref(name):
    return f"{name}#{random.token_hex(4)}"


def base_name(ref):
    return ref.split("#", 1)[0]


def store(cluster, values):
    """Store {name: value} for a cluster; returns {name: ref}. A value equal to the newest stored one under
    the same name reuses its ref (re-reading an unchanged node makes no new secret)."""
    refs = {}
    for name, value in values.items():
        latest = ConfigSecret.objects.filter(cluster=cluster, ref__startswith=f"{name}#").order_by("-id").first()
        if latest is not None and latest.value == value:
            refs[name] = latest.ref
            continue
        ref = new_ref(name)
        ConfigSecret.objects.create(cluster=cluster, ref=ref, value=value)
        refs[name] = ref
    return refs


def values_for(cluster_id, refs):
    """{ref: value} for these refs; a missing one is an error (a plan must never send a marker)."""
    found = dict(ConfigSecret.objects.filter(cluster_id=cluster_id, ref__in=list(refs)).values_list("ref", "value"))
    missing = set(refs) - found.keys()
    if missing:
        raise LookupError(f"secret(s) missing from the store: {', '.join(sorted(missing))}")
    return found


class Collector:
    """While a plan is written: turns secret values into Secret parameters (a marker in the statement, placed by
    position), remembering the values to store with the plan (e.g. a node's old password, for the rollback)."""

    def __init__(self, cluster, known):
        self.cluster = cluster
        self.known = known  # {ref: value} of the configuration's own secrets
        self.new = {}  # {ref: value} to store

    def marker_for_ref(self, ref):
        if ref not in self.known and ref not in self.new:
            raise LookupError(f"the configuration names secret {ref}, which is not stored")
        return Secret(ref)

    def marker_for_value(self, name, value):
        """A marker for a value the configuration does not hold (a node's current password, for the undo)."""
        digest = hashlib.sha256(f"{name}\0{value}".encode()).hexdigest()[:12]
        ref = f"{safe(name)}#was-{digest}"
        self.new[ref] = value
        return Secret(ref)

    def value(self, ref):
        return self.known[ref] if ref in self.known else self.new[ref]

    def save(self):
        for ref, value in self.new.items():
            ConfigSecret.objects.get_or_create(cluster=self.cluster, ref=ref, defaults={"value": value})
