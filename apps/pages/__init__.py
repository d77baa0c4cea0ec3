"""Page contexts that bring several apps together (the pages layer): above every app's core, below the doors
(views) that render them. An app's own page reads its app's selectors; a page that mixes apps (the fleet overview:
monitoring's summary, alerts' banner, operations' pending rollbacks) builds its context here, so that no app's core
and no app's views import another app's views (apps/tests/test_boundaries.py)."""
