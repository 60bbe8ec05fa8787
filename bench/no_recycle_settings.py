"""Bench-only settings: opsconsole's, with django-q2's worker recycling turned off.

django-q2 replaces a worker process after ``recycle`` tasks (500 by default), which would hide a
leak from ``bench/worker_memory.py``: with this module (``DJANGO_SETTINGS_MODULE``) the cluster's
two workers live through the whole run, so their RSS shows what one process accumulates.
"""

from opsconsole.settings import *  # noqa: F403
from opsconsole.settings import Q_CLUSTER as _PROJECT_Q_CLUSTER

Q_CLUSTER = {**_PROJECT_Q_CLUSTER, "recycle": 10**9}
