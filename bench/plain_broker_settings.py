"""Bench-only settings: opsconsole's, with django-q2's plain ORM broker (no ``enqueue_at``).

``bench/retry_lateness.py`` starts its baseline cluster with
``DJANGO_SETTINGS_MODULE=bench.plain_broker_settings``: ``ledger.core.nudges`` then skips the delayed nudge
of a retry (its broker cannot wait), so only the one-minute sweep finds the retry due, as before
delayed nudges existed. ``opsconsole/settings.py`` has no environment switch for this.
"""

from opsconsole.settings import *  # noqa: F403
from opsconsole.settings import Q_CLUSTER as _PROJECT_Q_CLUSTER

Q_CLUSTER = {**_PROJECT_Q_CLUSTER, "broker_class": "django_q.brokers.orm.ORM"}
