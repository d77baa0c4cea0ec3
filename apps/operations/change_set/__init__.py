"""Moved to apps/configuration/change_set.py (configuration owns its change sets end to end). This old import path
stays for branches that still import it (rollouts: plan_and_save, plan_change_set); a package, not change_set.py,
so that git follows the moved file in merges. Remove it once nothing imports apps.operations.change_set."""
from apps.configuration.change_set import *  # noqa: F401,F403
