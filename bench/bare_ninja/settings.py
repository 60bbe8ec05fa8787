"""Settings of the bare ninja service (bench/bare_ninja): Django, django-ninja and the database, nothing else.

    DJANGO_SETTINGS_MODULE=bench.bare_ninja.settings gunicorn -c opsconsole/gunicorn.conf.py bench.bare_ninja.wsgi

The baseline of HTTP intake (bench/scenario_peers.py): the least a Django service must run to take
a JSON event and write one row. No middleware, no authentication, no installed app, no templates,
no sessions. What it shares with opsconsole/settings.py is what the comparison needs to be fair:
the same gunicorn configuration (worker count, sync workers), the same database through the same
driver, one connection kept per worker (``CONN_MAX_AGE``, 600 s, with health checks), DEBUG off.
"""

import os

import environ

SECRET_KEY = os.environ["SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "bench.bare_ninja.urls"
WSGI_APPLICATION = "bench.bare_ninja.wsgi.application"
DATABASES = {"default": environ.Env.db_url_config(os.environ["DATABASE_URL"])}
DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ.get("CONN_MAX_AGE", 600))
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
TIME_ZONE = "UTC"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
