"""Moved to apps/plans/vocabulary.py (below configuration, which plans change sets). This old import path stays for
branches that still import it; a package, not plans.py, so that git follows the moved file in merges. Remove it
once nothing imports apps.operations.plans."""
from apps.plans.vocabulary import *  # noqa: F401,F403
