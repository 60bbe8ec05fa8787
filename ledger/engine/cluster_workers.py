"""A cluster worker as it starts (django-q2's ``post_spawn``): what it has loaded frozen, as each
gunicorn worker freezes its application (opsconsole/gunicorn.conf.py). Those objects (Django, the
apps, the models) live as long as the worker, and the collector's full passes no longer walk them:
each took tens of milliseconds, while the worker held claimed operations."""

import gc
import multiprocessing

from django.dispatch import receiver
from django_q.signals import post_spawn


@receiver(post_spawn, dispatch_uid="ledger.engine.cluster_workers.freeze_what_is_loaded")
def freeze_what_is_loaded(sender, **kwargs) -> None:
    # django-q2 sends it from its worker loop, which a task run synchronously (``sync=True``, the
    # tests' queue) enters in the caller's own process: only a worker the cluster spawned (a
    # multiprocessing child of its sentinel) freezes, never a web or test process mid-request.
    if multiprocessing.parent_process() is None:
        return
    gc.collect()
    gc.freeze()
