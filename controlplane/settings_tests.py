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

# Every persona the tests create (conftest._user_with_role, hundreds a pass) and every login through a form hashes a
# password: PBKDF2 costs 0.23 s of CPU a hash on the 2-core machine (measured), a fast hasher ~0.00002 s. Production
# keeps Django's default hashers (settings.py sets none).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
