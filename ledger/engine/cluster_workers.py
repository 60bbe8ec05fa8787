"""A cluster worker as it starts (django-q2's ``post_spawn``): what it has loaded frozen, as each
gunicorn worker freezes its application (opsconsole/gunicorn.conf.py). Those objects (Django, the
apps, the models) live as long as the worker, and the collector's full passes no longer walk them:
each took tens of milliseconds, while the worker held claimed operations."""

import gc

from django.dispatch import receiver
from django_q.signals import post_spawn


@receiver(post_spawn, dispatch_uid="ledger.engine.cluster_workers.freeze_what_is_loaded")
def freeze_what_is_loaded(sender, **kwargs) -> None:
    gc.collect()
    gc.freeze()
