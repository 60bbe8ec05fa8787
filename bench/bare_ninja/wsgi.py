"""WSGI entry point of the bare ninja service (bench/bare_ninja/settings.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.bare_ninja.settings")
application = get_wsgi_application()
