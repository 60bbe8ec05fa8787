"""Settings, read from the environment (django-environ). See README.md for the variables."""

from pathlib import Path

import environ
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
    "ledger",
    "reconciliation",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
# django-q2 reconnects for every task when connections are not kept (measured ~7x slower).
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=600)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web process and the qcluster write to one file: WAL lets readers go on while one
    # writes, IMMEDIATE takes the write lock at BEGIN so two writers queue instead of
    # deadlocking on a lock upgrade, and the busy timeout makes them wait rather than fail.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:queue"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "opsconsole.logging.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "loggers": {
        "ledger": {"handlers": ["console"], "level": env.str("LEDGER_LOG_LEVEL", default="INFO")},
    },
}

# --- opsconsole limits -------------------------------------------------------------------------
# Largest accepted body for one event, and for a batch request.
OPSCONSOLE_MAX_BODY_BYTES = env.int("OPSCONSOLE_MAX_BODY_BYTES", default=64 * 1024)
OPSCONSOLE_MAX_BATCH_BODY_BYTES = env.int("OPSCONSOLE_MAX_BATCH_BODY_BYTES", default=8 * 1024 * 1024)
OPSCONSOLE_MAX_BATCH = env.int("OPSCONSOLE_MAX_BATCH", default=500)
DATA_UPLOAD_MAX_MEMORY_SIZE = OPSCONSOLE_MAX_BATCH_BODY_BYTES + 1024

# Processing: how many operations one claim takes, how long a claim's lease lasts, and the
# default retry budget of a workspace (retries per hour; when spent, retries wait).
OPSCONSOLE_CLAIM_BATCH = env.int("OPSCONSOLE_CLAIM_BATCH", default=50)
OPSCONSOLE_LEASE_SECONDS = env.int("OPSCONSOLE_LEASE_SECONDS", default=60)
OPSCONSOLE_RETRY_BUDGET_PER_HOUR = env.int("OPSCONSOLE_RETRY_BUDGET_PER_HOUR", default=1000)
OPSCONSOLE_SWEEP_MAX_NUDGES = env.int("OPSCONSOLE_SWEEP_MAX_NUDGES", default=200)

# Reconciliation: how long after an unknown operation's last try began lookups that cannot tell
# are repeated (with backoff) before a person is asked.
OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = env.int("OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS", default=3600)

# External destinations: the stand-in (standin/, `python -m standin`) and the HTTP timeout.
OPSCONSOLE_STANDIN_URL = env.str("OPSCONSOLE_STANDIN_URL", default="http://127.0.0.1:8765")
OPSCONSOLE_HTTP_TIMEOUT_SECONDS = env.float("OPSCONSOLE_HTTP_TIMEOUT_SECONDS", default=5.0)

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
    "poll": 0.2,
    "bulk": 1,
    "label": "Task queue",
}
# The brokers are django-q2's, able to deliver a task later too (ledger.brokers): a retry or a
# lookup is nudged for its due time rather than waiting for the next sweep.
if env.str("Q_BROKER", default="orm") == "redis":
    Q_CLUSTER["redis"] = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
    Q_CLUSTER["broker_class"] = "ledger.brokers.Redis"
else:
    Q_CLUSTER["orm"] = "default"
    Q_CLUSTER["broker_class"] = "ledger.brokers.ORM"
