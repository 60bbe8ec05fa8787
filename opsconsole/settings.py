"""Settings, read from the environment (django-environ). See README.md for the variables."""

import re
import sys
from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)

# A development key only while DEBUG is on: a production process must be given its own.
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"

# The key of the keyed hash by which a sensitive identity field (an email address) enters an
# operation key (ledger.keys). Part of every such key, so unlike SECRET_KEY it is never rotated:
# changed, a redelivery gets another key. Every process (web, workers, commands) needs the same
# one. A development value only with DEBUG on or under pytest (tests hand it to their subprocesses).
OPSCONSOLE_KEY_SECRET = env.str("OPSCONSOLE_KEY_SECRET", default="")
if not OPSCONSOLE_KEY_SECRET:
    if not (DEBUG or "pytest" in sys.modules):
        raise ImproperlyConfigured("OPSCONSOLE_KEY_SECRET must be set when DEBUG is off.")
    OPSCONSOLE_KEY_SECRET = "dev-only-key-secret-do-not-use-in-production"

# The audit chain's key (ledger.core.audit_chain): each event is hashed with HMAC-SHA256 under it, so rewriting
# the chain needs a key the database never holds (it reaches the database only as a parameter of
# the statements that append). Every process needs the same one. Rotation (docs/operations.md): a
# new key under a new OPSCONSOLE_AUDIT_KEY_ID, the old one kept in OPSCONSOLE_AUDIT_OLD_KEYS
# ("id=secret,id=secret") so the events it hashed still verify. A development value only with
# DEBUG on or under pytest.
OPSCONSOLE_AUDIT_KEY = env.str("OPSCONSOLE_AUDIT_KEY", default="")
OPSCONSOLE_AUDIT_KEY_ID = env.str("OPSCONSOLE_AUDIT_KEY_ID", default="1")
if not OPSCONSOLE_AUDIT_KEY:
    if not (DEBUG or "pytest" in sys.modules):
        raise ImproperlyConfigured("OPSCONSOLE_AUDIT_KEY must be set when DEBUG is off.")
    OPSCONSOLE_AUDIT_KEY = "dev-only-audit-key-do-not-use-in-production"
    OPSCONSOLE_AUDIT_KEY_ID = env.str("OPSCONSOLE_AUDIT_KEY_ID", default="dev")
OPSCONSOLE_AUDIT_OLD_KEYS = dict(
    pair.strip().partition("=")[::2] for pair in env.list("OPSCONSOLE_AUDIT_OLD_KEYS", default=[])
)
for _key_id, _secret in [(OPSCONSOLE_AUDIT_KEY_ID, OPSCONSOLE_AUDIT_KEY), *OPSCONSOLE_AUDIT_OLD_KEYS.items()]:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,16}", _key_id) or not _secret:
        raise ImproperlyConfigured(
            f"Audit key id {_key_id!r}: 1-16 letters, digits, '_', '.' or '-', and a secret "
            "(OPSCONSOLE_AUDIT_KEY_ID, OPSCONSOLE_AUDIT_OLD_KEYS as id=secret,id=secret)."
        )
if OPSCONSOLE_AUDIT_OLD_KEYS.get(OPSCONSOLE_AUDIT_KEY_ID, OPSCONSOLE_AUDIT_KEY) != OPSCONSOLE_AUDIT_KEY:
    raise ImproperlyConfigured(
        f"OPSCONSOLE_AUDIT_OLD_KEYS holds another secret under the current key id "
        f"{OPSCONSOLE_AUDIT_KEY_ID!r}: a new key needs a new id."
    )
del _key_id, _secret
# Where the chains' heads are exported (ledger.core.audit_heads, a schedule and `manage.py
# export_audit_heads`): file:///path (a line appended) or http(s)://... (a line POSTed). Empty: nowhere.
OPSCONSOLE_AUDIT_HEADS_TO = env.str("OPSCONSOLE_AUDIT_HEADS_TO", default="")

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_q",
    "axes",
    "csp",
    "django_htmx",  # htmx itself, vendored in its static files: no CDN
    "ninja",  # Swagger UI from its own static files (not from a CDN): the docs page works offline
    "ledger",
    "reconciliation",
    "opsconsole",  # its commands: submit (answers as the API does), demo_setup (the embedded PostgreSQL)
    "opsconsole.console",  # its template tags (console_time)
]

MIDDLEWARE = [
    # /healthz and /readyz, answered before the Host check, the HTTPS redirect and the metrics.
    "opsconsole.health.ProbeMiddleware",
    # /api/ leaves here for API_MIDDLEWARE (below): what follows is the console's chain.
    "opsconsole.api_handler.ApiPathMiddleware",
    # First: every log line of the request carries its id; the database's absence becomes a 503.
    "opsconsole.middleware.RequestIdMiddleware",
    # Counted, timed and access-logged by route template, with the id, whatever answers inside.
    "opsconsole.requests_metrics.RequestMetricsMiddleware",
    "opsconsole.middleware.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Times in the person's time zone: the browser's, from the cookie static/timezone.js sets.
    "opsconsole.middleware.TimeZoneMiddleware",
    # Last, so its page passes out through the others (CSP, security headers): a bare 405 styled.
    "opsconsole.errors.MethodNotAllowedPageMiddleware",
    # A 404 is the console's page, DEBUG or not.
    "opsconsole.errors.NotFoundPageMiddleware",
]

# The API's chain (opsconsole.api_handler): an automation authenticates by bearer token and reads
# JSON, so no session, CSRF, user, messages, CSP, lockout, htmx, time zone, static files or error
# page. The same ids, metrics, access line, 503 and security headers as the console; CommonMiddleware
# for the Host check (ALLOWED_HOSTS) and Content-Length.
API_MIDDLEWARE = [
    "opsconsole.middleware.RequestIdMiddleware",
    "opsconsole.requests_metrics.RequestMetricsMiddleware",
    "opsconsole.middleware.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
]

ROOT_URLCONF = "opsconsole.urls"

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
            ],
        },
    },
]

WSGI_APPLICATION = "opsconsole.wsgi.application"

# PostgreSQL only, named by DATABASE_URL. `make demo` and `make test` start the embedded server
# (opsconsole/embedded_db.py, var/postgres) and set it when none is given; any other command is given
# one. Settings start no server themselves: every process (gunicorn's workers, each qcluster, each
# command) imports them, and one that started a server would have to own it and stop it.
DATABASE_URL = env.str("DATABASE_URL", default="")
if not DATABASE_URL:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set: name a PostgreSQL database (postgres://user@host:port/name). `make demo` and "
        "`make test` start the embedded PostgreSQL and set it themselves; for another command, the running demo's is "
        "`export DATABASE_URL=$(.venv/bin/python -m opsconsole.embedded_db url)`, or start it with "
        "`export DATABASE_URL=$(.venv/bin/python -m opsconsole.embedded_db start)` (README.md)."
    )
DATABASES = {"default": env.db_url_config(DATABASE_URL)}
# A streaming replica of DATABASE_URL's server (docs/operations.md, "Read replica"), or "". Only the
# read services of list pages, the dashboard and the exports ask for it, by name
# (ledger.reads.replica.for_lists); everything else, and every write, stays on "default".
DATABASE_REPLICA_URL = env.str("DATABASE_REPLICA_URL", default="")
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = env.db_url_config(DATABASE_REPLICA_URL)
for _alias, _setting, _url in (
    ("default", "DATABASE_URL", DATABASE_URL),
    ("replica", "DATABASE_REPLICA_URL", DATABASE_REPLICA_URL),
):
    if _alias in DATABASES and DATABASES[_alias]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            f"{_setting} must name a PostgreSQL database (postgres://...), not a {_url.partition(':')[0]}: one "
            "(the only database this project runs on)."
        )
# How DATABASE_URL's server keeps sessions: "session" (PostgreSQL itself, or a pooler in session
# mode) or "transaction" (PgBouncer's pool_mode = transaction: each transaction may run on another
# server session, so nothing may outlive one there). docs/operations.md, "Behind PgBouncer".
DATABASE_POOL_MODE = env.str("DATABASE_POOL_MODE", default="session")
if DATABASE_POOL_MODE not in ("session", "transaction"):
    raise ImproperlyConfigured(
        f"DATABASE_POOL_MODE must be session or transaction, not {DATABASE_POOL_MODE!r} (a pooler in "
        "statement mode cannot run the ledger's transactions)."
    )
# Connections, by kind of process (measured: docs/operations.md). gunicorn's workers
# (opsconsole/gunicorn.conf.py) and the qcluster's are a fixed number of single-threaded processes,
# so each keeps its one connection: reconnecting per request cuts the API's throughput to a third,
# per task makes django-q2 ~7x slower. runserver instead serves every client connection from a
# thread of its own, without bound, and each thread would keep a connection (64 keep-alive clients
# held 64): there the threads share a pool of a few connections, each returned after its request.
# The replica's connections are kept the same way: at most one more per web process.
for _database in DATABASES.values():
    _database["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=600)
    # Django's backend, its health check (before the first query of a request or task on a kept
    # connection) asking the socket instead of sending SELECT 1 (opsconsole/postgresql/base.py).
    _database["ENGINE"] = "opsconsole.postgresql"
    _database["CONN_HEALTH_CHECKS"] = True
    if DATABASE_POOL_MODE == "transaction":
        # A cursor declared outside a transaction (Django's iterator() in autocommit: WITH HOLD) would
        # be fetched from another session. prepare_threshold stays None (Django's default): psycopg
        # then prepares nothing, ledger.core.rows.prepared_cursor's statements included, as PgBouncer
        # before 1.21 keeps no prepared statement in this mode.
        _database["DISABLE_SERVER_SIDE_CURSORS"] = True
    else:
        # Prepared statements: Django's cursors bind parameters on the client and never prepare,
        # whatever this says; psycopg prepares only when it is set. Set, so that the few statements
        # sent through ledger.core.rows.prepared_cursor are prepared on their first use; so high that
        # psycopg prepares nothing else by count.
        _database.setdefault("OPTIONS", {})["prepare_threshold"] = 2**31 - 1
    if sys.argv[1:2] == ["runserver"]:
        _database["CONN_MAX_AGE"] = 0  # a pooled connection goes back to the pool instead
        _database.setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": 4}
if "replica" in DATABASES:
    # A replica out of reach is given up on quickly: the lists then read the primary.
    DATABASES["replica"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 3)
    # Tests make no database of their own for it: it is the test database under another name.
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
# The replica is never migrated and never written (ledger.reads.replica.Router).
DATABASE_ROUTERS = ["ledger.reads.replica.Router"]
# A page that read from the replica says how far behind it is once it lags more than this.
OPSCONSOLE_REPLICA_LAG_WARNING_SECONDS = env.int("OPSCONSOLE_REPLICA_LAG_WARNING_SECONDS", default=5)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# The admin's times in the console's form (opsconsole/formats/en/formats.py).
FORMAT_MODULE_PATH = ["opsconsole.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# A refused form (its CSRF token missing or stale) gets the console's page, not Django's bare one.
CSRF_FAILURE_VIEW = "opsconsole.errors.csrf_failure"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:queue"

# --- security ----------------------------------------------------------------------------------
# OPSCONSOLE_SECURE=1: production, served over HTTPS by a proxy that terminates TLS in front of
# gunicorn (docs/operations.md). `manage.py check --deploy` is clean in this mode.
OPSCONSOLE_SECURE = env.bool("OPSCONSOLE_SECURE", default=False)
if OPSCONSOLE_SECURE:
    SECURE_SSL_REDIRECT = True
    # The proxy says whether the client came over HTTPS; it must overwrite any X-Forwarded-Proto a
    # client sends. The Host header is passed through as it is, so USE_X_FORWARDED_HOST stays off.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

# The proxies whose X-Forwarded-For is believed when telling clients apart (opsconsole.proxy).
# None by default, the local host included: any process on the machine can connect from 127.0.0.1
# and write the header, and would then pick a new address for every guess at a password. A
# deployment behind a proxy names it (e.g. 127.0.0.1 for nginx on the same host).
OPSCONSOLE_TRUSTED_PROXIES = env.list("OPSCONSOLE_TRUSTED_PROXIES", default=[])

# Login throttling (django-axes): after AXES_FAILURE_LIMIT wrong passwords for one username from
# one address, that pair is locked out until AXES_COOLOFF_TIME has passed since its last failure
# (trying while locked out starts the wait again); others, and that person elsewhere, are not.
# `manage.py axes_reset_username NAME` unlocks someone at once.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("OPSCONSOLE_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("OPSCONSOLE_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "opsconsole.proxy.client_ip"

# Content Security Policy (django-csp): every script and style comes from our own static files
# (the console's, the admin's, Swagger UI's); the stylesheets' icons are data: URIs.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "img-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# Log lines go to standard error, or to this file when it is set: `make demo` sets it for the
# commands it runs in the person's terminal (var/commands.log), so their output stays readable.
OPSCONSOLE_LOG_FILE = env.str("OPSCONSOLE_LOG_FILE", default="")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "opsconsole.logging.JsonFormatter"}},
    # What a view raised, without its message, whichever handler prints it (opsconsole.logging).
    "filters": {"exception_message_withheld": {"()": "opsconsole.logging.WithheldExceptionMessage"}},
    "handlers": {
        "console": (
            {"class": "logging.FileHandler", "filename": OPSCONSOLE_LOG_FILE, "formatter": "json"}
            if OPSCONSOLE_LOG_FILE
            else {"class": "logging.StreamHandler", "formatter": "json"}
        )
    },
    "loggers": {
        # runserver's line per request: the access log below writes one already (each request once).
        "django.server": {"handlers": [], "propagate": False},
        "ledger": {"handlers": ["console"], "level": env.str("LEDGER_LOG_LEVEL", default="INFO")},
        # Server errors (5xx) with their tracebacks, and refused requests (bad Host, CSRF), as JSON
        # lines carrying the request id: with DEBUG off nothing else would print them.
        "django.request": {
            "handlers": ["console"],
            "level": "ERROR",
            "propagate": False,
            "filters": ["exception_message_withheld"],
        },
        "django.security": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # The access log (a line per request) and why /readyz is not ready.
        "opsconsole": {
            "handlers": ["console"],
            "level": env.str("OPSCONSOLE_LOG_LEVEL", default="INFO"),
            "propagate": False,
        },
    },
}
if OPSCONSOLE_LOG_FILE:
    # django-q2's own lines ("[Q] INFO Enqueued ...") follow the others into the file.
    LOGGING["loggers"]["django-q"] = {"handlers": ["console"], "level": "INFO", "propagate": False}

# /readyz answers 503 when the sweep's heartbeat is older than this (0: it does not ask).
OPSCONSOLE_SWEEP_STALE_SECONDS = env.int("OPSCONSOLE_SWEEP_STALE_SECONDS", default=300)

# Server errors to Sentry, when a DSN is given, without any payload value (opsconsole/sentry.py).
SENTRY_DSN = env.str("SENTRY_DSN", default="")
if SENTRY_DSN:
    from opsconsole.sentry import init_sentry

    init_sentry(
        SENTRY_DSN,
        environment=env.str("SENTRY_ENVIRONMENT", default="production"),
        release=env.str("SENTRY_RELEASE", default=""),
    )

# /metrics answers only a scraper presenting this bearer token (Prometheus `authorization`); unset: off.
OPSCONSOLE_METRICS_TOKEN = env.str("OPSCONSOLE_METRICS_TOKEN", default="")

# --- opsconsole limits -------------------------------------------------------------------------
# Largest accepted body for one event, and for a batch request.
OPSCONSOLE_MAX_BODY_BYTES = env.int("OPSCONSOLE_MAX_BODY_BYTES", default=64 * 1024)
OPSCONSOLE_MAX_BATCH_BODY_BYTES = env.int("OPSCONSOLE_MAX_BATCH_BODY_BYTES", default=8 * 1024 * 1024)
OPSCONSOLE_MAX_BATCH = env.int("OPSCONSOLE_MAX_BATCH", default=500)
# The most claims one POST /api/v1/claims/batch may hold: each is decided with its row held, all in one
# transaction (docs/claims.md), so fewer than an events batch.
OPSCONSOLE_MAX_CLAIM_BATCH = env.int("OPSCONSOLE_MAX_CLAIM_BATCH", default=100)
DATA_UPLOAD_MAX_MEMORY_SIZE = OPSCONSOLE_MAX_BATCH_BODY_BYTES + 1024

# Processing: how many operations one claim takes, how long a claim's lease lasts, and the
# default retry budget of a workspace (retries per hour; when spent, retries wait).
OPSCONSOLE_CLAIM_BATCH = env.int("OPSCONSOLE_CLAIM_BATCH", default=50)
# How many due operations a task's claim reads: those of internal actions known to work finish in
# the claim's transaction, all of them (ledger.engine.claiming.finish_in_claim); of the others, at most a
# claim batch is claimed.
OPSCONSOLE_FINISH_IN_CLAIM_BATCH = env.int("OPSCONSOLE_FINISH_IN_CLAIM_BATCH", default=200)
# How long one processing task goes on claiming batch after full batch (ledger.tasks.process_operations)
# before it hands the rest to a new task: what other tasks may wait behind a backlog.
OPSCONSOLE_PROCESS_SECONDS = env.float("OPSCONSOLE_PROCESS_SECONDS", default=1.0)
OPSCONSOLE_LEASE_SECONDS = env.int("OPSCONSOLE_LEASE_SECONDS", default=60)
# Claims by callers that perform their own effect (docs/claims.md): the leases a caller may ask for.
# Short enough that a dead caller's operation is soon looked up; long enough for a slow connector
# between heartbeats.
OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN = env.int("OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN", default=5)
OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX = env.int("OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX", default=3600)
OPSCONSOLE_RETRY_BUDGET_PER_HOUR = env.int("OPSCONSOLE_RETRY_BUDGET_PER_HOUR", default=1000)

# Reconciliation: how long after an unknown operation's last try began lookups that cannot tell
# are repeated (with backoff) before a person is asked.
OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = env.int("OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS", default=3600)

# External destinations: the stand-in (standin/, `python -m standin`) and the HTTP timeout.
OPSCONSOLE_STANDIN_URL = env.str("OPSCONSOLE_STANDIN_URL", default="http://127.0.0.1:8765")
# The console asks the stand-in how many scripted faults it holds and says so (the dashboard, an
# operation that calls it): on in `make demo` only, as a deployment has no stand-in to ask.
OPSCONSOLE_SHOW_STANDIN_FAULTS = env.bool("OPSCONSOLE_SHOW_STANDIN_FAULTS", default=False)
OPSCONSOLE_HTTP_TIMEOUT_SECONDS = env.float("OPSCONSOLE_HTTP_TIMEOUT_SECONDS", default=5.0)
# Where people reach this console, for the links notifications carry to an operation's page
# (ledger.core.announcements): scheme and host, no trailing slash.
OPSCONSOLE_SITE_URL = env.str("OPSCONSOLE_SITE_URL", default="http://localhost:8000").rstrip("/")
# The egress policy (ledger.actions.egress, docs/operations.md): destinations on loopback or in private
# ranges are refused unless this allows them (link-local and the cloud metadata address always are).
# On by default only with DEBUG or under pytest, where the stand-in vendor listens on 127.0.0.1.
OPSCONSOLE_EGRESS_ALLOW_PRIVATE = env.bool("OPSCONSOLE_EGRESS_ALLOW_PRIVATE", default=DEBUG or "pytest" in sys.modules)

# --- django-q2 ---------------------------------------------------------------------------------
# retry must exceed timeout and the lease, or the queue re-runs tasks that are still running
# (ledger.checks enforces this). save_limit=-1 keeps no successful results: saving them takes a
# lock over all results per save (measured ~4x slower), and the ledger is the record anyway.
Q_CLUSTER = {
    "name": env.str("Q_CLUSTER_NAME", default="opsconsole"),
    "workers": env.int("Q_WORKERS", default=2),
    "timeout": env.int("Q_TIMEOUT", default=90),
    "retry": env.int("Q_RETRY", default=120),
    "save_limit": -1,
    "ack_failures": True,
    "max_attempts": 1,
    "catch_up": False,
    "poll": 0.1,
    "bulk": 1,
    "label": "Task queue",
}
# The brokers are django-q2's, able to deliver a task later too (ledger.engine.brokers): a retry or a
# lookup is nudged for its due time rather than waiting for the next sweep.
if env.str("Q_BROKER", default="orm") == "redis":
    Q_CLUSTER["redis"] = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
    Q_CLUSTER["broker_class"] = "ledger.engine.brokers.Redis"
else:
    Q_CLUSTER["orm"] = "default"
    Q_CLUSTER["broker_class"] = "ledger.engine.brokers.ORM"
