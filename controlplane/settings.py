"""Settings for the control plane. Every knob comes from the environment; see README "Configuration".

Without DJANGO_DEBUG the settings are production's: SECRET_KEY and CREDENTIALS_KEYS must be set (strong
enough, well-formed, and not the repository's development keys), cookies are Secure, HSTS is on. A developer's machine,
bin/demo and the tests ask for development mode explicitly with DJANGO_DEBUG=1: then the development
keys below are used when none is set, SQLite under var/ and Redis on localhost remain the defaults.
"""

import importlib.util
import ipaddress
import os
import re
from pathlib import Path

import dj_database_url
from cryptography.fernet import Fernet
from django.core.checks.security import base as django_checks
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))


def envbool(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def envint(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def envfloat(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None


def envlist(name, default=""):
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# Production unless asked otherwise: a forgotten variable must not publish the development keys.
DEBUG = envbool("DJANGO_DEBUG", False)

# Development mode falls back to fixed, clearly-marked keys. They are in the repository, so anyone with
# the code could decrypt what they protect: production refuses them (and refuses to start without keys).
_DEV_SECRET_KEY = "dev-only-insecure-secret-key-change-me"
_DEV_CREDENTIALS_KEY = "ZGV2LW9ubHktY3JlZGVudGlhbHMta2V5LTMyYnl0ZXM="  # base64 of 32 bytes, dev only
_NEW_FERNET_KEY = "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
SECRET_KEY = os.environ.get("SECRET_KEY") or (_DEV_SECRET_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY must be set in production (a long random string, e.g. from "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`); for development on your own "
        "machine set DJANGO_DEBUG=1 instead"
    )
if not DEBUG and SECRET_KEY == _DEV_SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY is the repository's development key, which anyone with the code "
        "knows: set your own in production (or DJANGO_DEBUG=1 for development)"
    )
# What Django's deployment check calls weak (security.W009), refused at start (the value is never printed).
if not DEBUG and (
    len(SECRET_KEY) < django_checks.SECRET_KEY_MIN_LENGTH
    or len(set(SECRET_KEY)) < django_checks.SECRET_KEY_MIN_UNIQUE_CHARACTERS
    or SECRET_KEY.startswith(django_checks.SECRET_KEY_INSECURE_PREFIX)
):
    raise ImproperlyConfigured(
        f"SECRET_KEY is too weak: use at least {django_checks.SECRET_KEY_MIN_LENGTH} characters, "
        f"{django_checks.SECRET_KEY_MIN_UNIQUE_CHARACTERS} of them different, not starting with "
        f"{django_checks.SECRET_KEY_INSECURE_PREFIX!r} (e.g. from "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`)"
    )

# Fernet keys for ProxySQL and backend credentials at rest. The first encrypts; all of them decrypt,
# so a new key can be put first while `manage.py rotate_credentials` re-encrypts every stored secret.
CREDENTIALS_KEYS = envlist("CREDENTIALS_KEYS") or ([_DEV_CREDENTIALS_KEY] if DEBUG else [])
if not CREDENTIALS_KEYS:
    raise ImproperlyConfigured(
        f"CREDENTIALS_KEYS must be set in production (a Fernet key from `{_NEW_FERNET_KEY}`); "
        f"for development on your own machine set DJANGO_DEBUG=1 instead"
    )
for _number, _key in enumerate(CREDENTIALS_KEYS, 1):  # a malformed key is never usable, in development either
    try:
        Fernet(_key)
    except ValueError:
        raise ImproperlyConfigured(
            f"CREDENTIALS_KEYS: key {_number} of {len(CREDENTIALS_KEYS)} is not a Fernet key "
            f"(32 url-safe base64-encoded bytes; make one with `{_NEW_FERNET_KEY}`)"
        ) from None
if not DEBUG and _DEV_CREDENTIALS_KEY in CREDENTIALS_KEYS:
    raise ImproperlyConfigured(
        "CREDENTIALS_KEYS holds the repository's development key, which anyone with the code knows: put a new "
        f"key (`{_NEW_FERNET_KEY}`) in its place. To re-encrypt passwords stored under the development key, run "
        "once `DJANGO_DEBUG=1 CREDENTIALS_KEYS=<new>,<development key> manage.py rotate_credentials`"
    )

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "apps.accounts.apps.ConsoleAdminConfig",  # Django's admin; its login is the console's (throttled, audited)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # the Swagger UI's files, served from our own static files (CSP, isolated networks)
    "apps.accounts",
    "apps.audit",
    "apps.fleet",
    "apps.monitoring",
    "apps.digests",
    "apps.operations",
    "apps.configuration",
    "apps.reports",
    "apps.alerts",
    "apps.api",
    "apps.dr",
    "apps.rollouts",
]
# The lab's management commands (manage.py bench_operations, lab_report_history) in development mode
# only, when the checkout has lab/: the product imports nothing from it, production never loads it.
if DEBUG and importlib.util.find_spec("lab") is not None:
    INSTALLED_APPS.append("lab.apps.LabConfig")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "apps.accounts.middleware.SecurityHeadersMiddleware",
    # /api/: a body larger than API_MAX_REQUEST_BYTES is refused (413) before anything reads it.
    "apps.api.middleware.RequestSizeLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Every URL needs a login unless its view is marked @login_not_required (only the login page).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.accounts.context_processors.roles",
            ],
            # {% partialdef %} everywhere: htmx partials live inside the page that uses them.
            "builtins": ["template_partials.templatetags.partials"],
        },
    }
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'controlplane.sqlite3'}",
        conn_max_age=envint("DATABASE_CONN_MAX_AGE", 60),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory, so that Celery workers started by integration tests see the test database.
    # Named per process so that concurrent test runs on one machine do not share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test_controlplane_{os.getpid()}.sqlite3")}
    # WAL: pollers, workers and pages read while one writes; NORMAL sync is safe with WAL and makes
    # each short transaction (an operation's step bookkeeping) cost well under a millisecond.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"].setdefault("OPTIONS", {}).update({"charset": "utf8mb4"})
    DATABASES["default"]["TEST"] = {
        "CHARSET": "utf8mb4",
        "COLLATION": "utf8mb4_unicode_ci",
        "NAME": f"test_controlplane_{os.getpid()}",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "pages:overview"
LOGOUT_REDIRECT_URL = "accounts:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
# Serve static files straight from static/ when collectstatic has not run (development and the demo).
WHITENOISE_USE_FINDERS = DEBUG
if DEBUG:
    # Finders serve static files; an empty STATIC_ROOT keeps whitenoise from warning on every start.
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)

# A latest-state document that does not match its schema (apps/monitoring/live_doc.py): raise (the tests set it) or
# log and write it all the same (production: a poll is never lost to a writer's bug).
LIVE_DOC_STRICT = envbool("LIVE_DOC_STRICT", False)

# Monitoring: poll intervals (a cluster's poll_interval_s overrides the default), shards, retention.
MONITOR_DEFAULT_INTERVAL_S = envfloat("MONITOR_DEFAULT_INTERVAL_S", 2.0)
MONITOR_DIGEST_INTERVAL_S = envfloat("MONITOR_DIGEST_INTERVAL_S", 30.0)
MONITOR_DIGEST_READ_TIMEOUT = envfloat("MONITOR_DIGEST_READ_TIMEOUT", 10.0)  # 100,000 digests: ~1 s to answer
MONITOR_VARIABLES_INTERVAL_S = envfloat("MONITOR_VARIABLES_INTERVAL_S", 60.0)
# users, sessions by command, backend errors and command counters (query_stats.py): not at every fast poll
MONITOR_QUERY_STATS_INTERVAL_S = envfloat("MONITOR_QUERY_STATS_INTERVAL_S", 30.0)
MONITOR_SHARDS = envint("MONITOR_SHARDS", 4)
MONITOR_THREADS = envint("MONITOR_THREADS", 32)
MONITOR_RETENTION_RAW_H = envfloat("MONITOR_RETENTION_RAW_H", 24)
MONITOR_RETENTION_MINUTE_D = envfloat("MONITOR_RETENTION_MINUTE_D", 14)
MONITOR_RETENTION_HOUR_D = envfloat("MONITOR_RETENTION_HOUR_D", 396)

# An operation whose worker has not beaten for this long is rolled back by the reaper (beat, every 5 s).
OPERATIONS_STALE_AFTER_S = envfloat("OPERATIONS_STALE_AFTER_S", 15)
# A planned operation nobody confirmed within this many seconds of its planning expires (its guards are stale):
# its page offers only Discard, confirm refuses it, the reaper marks it expired.
OPERATIONS_PLAN_CONFIRM_S = envfloat("OPERATIONS_PLAN_CONFIRM_S", 900)
# CPU seconds one request or task may spend walking query rules over digests (a plan's effect check over the stored
# traffic, the rule tester, a digest page's routes; configuration/rule_tester.Batch): past it, the rules not yet
# tested are reported as not measured. 5,000 stored rows x 50 ordinary rules take about 1.5 s (lab/bench_rule_patterns.py).
RULE_WALK_BUDGET_S = envfloat("RULE_WALK_BUDGET_S", 5.0)
# CPU seconds of one digest poll of a node for its mirror rules' searches together (apps/monitoring/mirror.py: the
# mirror loss, and the copies marked in the stored rows): 300 digest texts x 50 ordinary rules take about 4 ms; past it
# the poll's rules are not measured (said on each rule's window, and on the digest list as "not measured").
MIRROR_POLL_BUDGET_S = envfloat("MIRROR_POLL_BUDGET_S", 1.0)

# Alerts (apps/alerts): rules evaluated after every poll round; notifications grouped per channel and cluster.
ALERTS_ENABLED = envbool("ALERTS_ENABLED", True)
ALERTS_SWEEP_S = envfloat("ALERTS_SWEEP_S", 10.0)  # each cluster judged as a whole at least this often
ALERTS_HOLD_SETTLE_POLLS = envfloat("ALERTS_HOLD_SETTLE_POLLS", 2)  # a hold lasts this many polls past its operation
ALERTS_GROUP_WAIT_S = envfloat("ALERTS_GROUP_WAIT_S", 0.5)
ALERTS_GROUP_INTERVAL_S = envfloat("ALERTS_GROUP_INTERVAL_S", 300.0)
ALERTS_REPEAT_INTERVAL_S = envfloat("ALERTS_REPEAT_INTERVAL_S", 4 * 3600.0)
ALERTS_ALERTMANAGER_RESEND_S = envfloat("ALERTS_ALERTMANAGER_RESEND_S", 60.0)
ALERTS_DELIVERY_RETRIES = envint("ALERTS_DELIVERY_RETRIES", 8)
ALERTS_RETRY_BASE_S = envfloat("ALERTS_RETRY_BASE_S", 2.0)
ALERTS_HTTP_TIMEOUT_S = envfloat("ALERTS_HTTP_TIMEOUT_S", 5.0)
ALERTS_DIGEST_EVERY_S = envfloat("ALERTS_DIGEST_EVERY_S", 300.0)  # the query-digest rules, per cluster
# Where alert channels (webhook, Slack, PagerDuty, Alertmanager) may post: host names (*.example.net), addresses or
# CIDRs, each optionally with :port, comma-separated (apps/alerts/destinations.py); empty: anywhere.
ALERT_CHANNEL_DESTINATIONS = envlist("ALERT_CHANNEL_DESTINATIONS", "")
# Loopback, link-local and private addresses are refused unless a CIDR entry above names them, or this is on (the
# test suite's receivers listen on 127.0.0.1).
ALERT_CHANNEL_PRIVATE_ADDRESSES = envbool("ALERT_CHANNEL_PRIVATE_ADDRESSES", False)

# Audit retention: events older than this many days are archived to gzip JSONL files, then removed.
AUDIT_RETENTION_DAYS = envint("AUDIT_RETENTION_DAYS", 400)
AUDIT_ARCHIVE_DIR = Path(os.environ.get("AUDIT_ARCHIVE_DIR", VAR_DIR / "audit-archive"))
# Repeated identical refusals: this many per window are written one by one, the rest counted into one
# summary event per window (apps/audit/services.py, "repeated refusals"), so a flood cannot flood the log.
AUDIT_REFUSAL_BURST = envint("AUDIT_REFUSAL_BURST", 5)
AUDIT_REFUSAL_WINDOW_S = envfloat("AUDIT_REFUSAL_WINDOW_S", 60)

# Prometheus /metrics (apps/monitoring/scrape_access.py): no session there. A scrape is let in by a bearer token
# (METRICS_TOKEN: the token itself, or "sha256:" and its SHA-256 in hex so the environment need not hold it) or
# by its peer address (REMOTE_ADDR) in METRICS_ALLOWED_ADDRESSES (CIDRs; set it empty to ask every scrape for the
# token). Checked here so that a typo stops the start, not every scrape.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
METRICS_ALLOWED_ADDRESSES = envlist("METRICS_ALLOWED_ADDRESSES", "127.0.0.1/32,::1/128")
# Where /metrics/targets tells Prometheus (its HTTP service discovery) to scrape: scheme://host[:port], e.g.
# https://console.example.net; empty: the scheme and address the discovery request itself was sent to (its Host
# header, checked against ALLOWED_HOSTS).
METRICS_TARGET_URL = os.environ.get("METRICS_TARGET_URL", "")


def _check_metrics_settings():
    for cidr in METRICS_ALLOWED_ADDRESSES:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"METRICS_ALLOWED_ADDRESSES: {cidr!r} is not an address or CIDR (e.g. 10.0.0.0/8, ::1/128)"
            ) from None
    if METRICS_TARGET_URL and not re.fullmatch(r"https?://[^/?#@\s]+", METRICS_TARGET_URL):
        raise ImproperlyConfigured(
            f"METRICS_TARGET_URL: {METRICS_TARGET_URL!r} is not scheme://host[:port] (e.g. "
            "https://console.example.net), without a path"
        )
    if METRICS_TOKEN.startswith("sha256:"):
        if not re.fullmatch(r"[0-9a-fA-F]{64}", METRICS_TOKEN[7:]):
            raise ImproperlyConfigured("METRICS_TOKEN: after sha256: come the 64 hex digits of the token's SHA-256")
    elif METRICS_TOKEN and len(METRICS_TOKEN) < 16:
        raise ImproperlyConfigured(
            "METRICS_TOKEN is too short to be a secret: use at least 16 characters (e.g. from "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )


_check_metrics_settings()


def _check_alert_destinations():
    # why: the apps are not importable while the settings load (apps.alerts.destinations reads django.conf.settings)
    from apps.alerts.destinations import split_entry

    for entry in ALERT_CHANNEL_DESTINATIONS:
        try:
            split_entry(entry)
        except ValueError:
            raise ImproperlyConfigured(
                f"ALERT_CHANNEL_DESTINATIONS: {entry!r} is not a host, address or CIDR with an "
                "optional :port (e.g. hooks.slack.com, *.example.net:443, 10.0.0.0/8:9093)"
            ) from None


_check_alert_destinations()

# Network timeouts (seconds) of the two clients; each call is bounded by these.
PROXYSQL_CONNECT_TIMEOUT = envfloat("PROXYSQL_CONNECT_TIMEOUT", 0.5)
PROXYSQL_READ_TIMEOUT = envfloat("PROXYSQL_READ_TIMEOUT", 0.8)
BACKEND_CONNECT_TIMEOUT = envfloat("BACKEND_CONNECT_TIMEOUT", 0.5)
BACKEND_READ_TIMEOUT = envfloat("BACKEND_READ_TIMEOUT", 0.8)

# The JSON API (/api/v1/, apps/api): limits, and the cache its rate limits count in. The counters live in
# Redis (shared by every web process); when Redis does not answer they fall back to each process's memory
# rather than failing requests (apps/api/throttling.py).
API_MAX_REQUEST_BYTES = envint("API_MAX_REQUEST_BYTES", 6 * 1024 * 1024)  # a 5 MB configuration file fits
API_PAGE_SIZE = envint("API_PAGE_SIZE", 50)
API_MAX_PAGE_SIZE = envint("API_MAX_PAGE_SIZE", 500)
API_THROTTLE_RATES = {
    "read": os.environ.get("API_THROTTLE_READ", "1200/min"),
    "write": os.environ.get("API_THROTTLE_WRITE", "120/min"),
}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "api-throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "api",
        "OPTIONS": {"socket_connect_timeout": 0.3, "socket_timeout": 0.5},
    },
    "api-throttle-local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "api-throttle"},
    # Rendered report PDFs (reports.services.report_pdf), by a digest of their content: a few per process.
    "report-pdf": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "report-pdf",
        "TIMEOUT": 3600,
        "OPTIONS": {"MAX_ENTRIES": 16},
    },
}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.api.auth.BearerTokenAuthentication",
        "apps.api.auth.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["apps.api.permissions.RolePermission"],
    "DEFAULT_THROTTLE_CLASSES": ["apps.api.throttling.PerTokenThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["apps.api.parsers.StrictJSONParser", "rest_framework.parsers.MultiPartParser"],
    "DEFAULT_METADATA_CLASS": None,  # OPTIONS answers 405: the schema documents every endpoint
    "EXCEPTION_HANDLER": "apps.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DATETIME_FORMAT": "iso-8601",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "ProxySQL fleet control plane API",
    "DESCRIPTION": "The console's JSON API. Authenticate with `Authorization: Bearer <token>` (make a token on the "
    'API tokens page) or the browser session. Every error is `{"error": {"code", "message", '
    '"fields"}}`. See README, "API and command line".',
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No call to the public validator: the docs page works on an isolated network, under our CSP.
    "SWAGGER_UI_SETTINGS": {"validatorUrl": None, "deepLinking": True, "persistAuthorization": False},
    "ENUM_NAME_OVERRIDES": {
        "OperationStateEnum": "apps.operations.choices.OperationState",
        "StepStateEnum": "apps.operations.choices.StepState",
        "OperationKindEnum": "apps.plans.registry.choices",
        "ClusterKindEnum": "apps.fleet.choices.ClusterKind",
        "ChangeSetStateEnum": "apps.configuration.models.ChangeSet.State",
        "AlertStateEnum": "apps.alerts.models.AlertState",
        "SeverityEnum": "apps.alerts.models.SEVERITY_CHOICES",
        "BinaryFlagEnum": [(0, "0"), (1, "1")],
    },
}

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = envint("SESSION_COOKIE_AGE", 12 * 3600)
CSRF_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# Production sits behind TLS: redirect plain HTTP and tell browsers to stay on HTTPS.
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", not DEBUG)
if envbool("SECURE_PROXY_SSL_HEADER", False):  # behind a proxy that sets X-Forwarded-Proto
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Login throttling: this many failures per user name and source address together within the window (one
# address guessing many names locks none of them for anyone else).
LOGIN_MAX_FAILURES = envint("LOGIN_MAX_FAILURES", 5)
# Reverse proxies (addresses or CIDRs, comma-separated) whose X-Forwarded-For names the client (login throttling,
# the audit log's source address); empty: the peer address is the client (controlplane/client_address.py).
TRUSTED_PROXY_ADDRESSES = envlist("TRUSTED_PROXY_ADDRESSES", "")
LOGIN_FAILURE_WINDOW_S = envint("LOGIN_FAILURE_WINDOW_S", 900)
# Guesses at one user name spread over many addresses: above this many failures in the window (every address
# together), that name is refused except from addresses it logged in from within LOGIN_KNOWN_ADDRESS_DAYS.
LOGIN_MAX_FAILURES_PER_USER = envint("LOGIN_MAX_FAILURES_PER_USER", 30)
LOGIN_KNOWN_ADDRESS_DAYS = envint("LOGIN_KNOWN_ADDRESS_DAYS", 30)
# Adoption reads the admin port it is given with the credentials it is given: at most this many previews a
# minute per user, so the form is no port scanner or password oracle (every attempt is audited).
ADOPT_ATTEMPTS_PER_MINUTE = envint("ADOPT_ATTEMPTS_PER_MINUTE", 10)

# Health reports by e-mail. In development (DEBUG) mail is printed on the console unless EMAIL_BACKEND is set.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND") or (
    "django.core.mail.backends.console.EmailBackend" if DEBUG else "django.core.mail.backends.smtp.EmailBackend"
)
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = envfloat("EMAIL_TIMEOUT", 10.0)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "ProxySQL fleet <proxysql-fleet@localhost>")
REPORTS_BASE_URL = os.environ.get("REPORTS_BASE_URL", "http://127.0.0.1:8000")  # links in mailed reports
ALERTS_BASE_URL = os.environ.get("ALERTS_BASE_URL", REPORTS_BASE_URL)  # links in notifications

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
