"""A secret in a statement's parameters, by reference: Secret(ref). A plan renders it as a marker and the executor
fills in the value from the console's encrypted store (apps/plans/vocabulary.py place/fill); the configuration names
its secrets with such references (apps/configuration/secrets.py). SECRET_REF: what a reference may hold."""

import re
from dataclasses import dataclass

SECRET_REF = re.compile(r"[A-Za-z0-9_/#.@:-]+")


@dataclass(frozen=True)
class Secret:
    """A statement parameter the planner fills with a secret: rendered as its marker, placed by position."""

    ref: str
