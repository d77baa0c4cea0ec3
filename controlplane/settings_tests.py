"""The test suite's settings (pytest.ini): development mode, asked for explicitly.

The tests run with the development keys, as bin/demo does. DJANGO_DEBUG goes into the environment, not
only into DEBUG, so that what the tests start (Celery workers, manage.py in a subprocess) runs in the
same mode. A test that wants production passes DJANGO_DEBUG=0 and its own keys to its subprocess
(hence setdefault: an explicit choice in the environment wins).
(pytest-django still runs each test with DEBUG off, as Django's test runner does.)
"""

import os

os.environ.setdefault("DJANGO_DEBUG", "1")
# A latest-state document that does not match its schema (apps/monitoring/live_doc.py) fails the test (or the
# worker it started) that wrote it.
os.environ.setdefault("LIVE_DOC_STRICT", "1")
# The alert tests' receivers listen on 127.0.0.1 (a test proves the default refuses it).
os.environ.setdefault("ALERT_CHANNEL_PRIVATE_ADDRESSES", "1")

from .settings import *  # noqa: E402,F401,F403
