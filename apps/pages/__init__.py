"""The composite pages (issue 35 item 4): the fleet overview, a cluster, a ProxySQL node, a backend and the incident
view (views.py, urls.py, namespace "pages"), and the contexts of pages that mix apps (fleet.py, node.py, incident.py,
search.py, metrics.py). A
door above every app's core: it reads their selectors and calls their services, and no app's core imports it
(apps/tests/test_boundaries.py); an app's own views may use its contexts (monitoring's node and search pages, the
fragments' response). An app's own pages stay in that app's views."""
