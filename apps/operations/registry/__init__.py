"""Moved to apps/plans/registry.py (below configuration, which registers its change sets there). This old import
path stays for branches that still import it; a package, not registry.py, so that git follows the moved file in
merges. Remove it once nothing imports apps.operations.registry."""
from apps.plans.registry import *  # noqa: F401,F403
