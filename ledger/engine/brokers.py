"""django-q2 brokers that can also deliver a task later (django-q2 has no delay of its own), and
whose ORM broker takes a new task at once instead of at its next poll.

A retry due in 40 seconds should run in 40 seconds, not when the one-minute sweep next looks.
``settings.Q_CLUSTER["broker_class"]`` names one of these; ``ledger.core.nudges.enqueue_at`` uses
``enqueue_at``. A delayed task that is lost (a Redis restart) costs only time: the sweep still
re-drives whatever is due.
"""

import time
from datetime import datetime

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django_q.brokers import orm, redis_broker
from django_q.conf import Conf

# The channel a trigger on django-q2's queue table notifies on every insert (``engine/sql/announce_task*.sql``).
TASK_CHANNEL = "ledger_task_enqueued"


class ORM(orm.ORM):
    """The ORM broker already hides a row until its ``lock`` time passes (that is how it re-delivers
    a task whose worker died), so a delayed task is a row locked until it is due.

    django-q2's ORM broker sleeps its ``poll`` (0.1 s) whenever it finds the queue empty, so a task
    enqueued into an idle cluster waited 50 ms on average before a worker saw it, and so did the
    first claim of a resumed backlog and each follow-up. This one waits on LISTEN
    instead: a task's insert notifies (a trigger, so every process that enqueues does), and the
    pusher takes it within a millisecond. The poll stays the longest wait, for what no insert
    announces: a delayed task coming due, a task whose worker died coming back.

    Behind a pooler in transaction mode (``DATABASE_POOL_MODE``) it polls as django-q2's does: a
    LISTEN would hold for the server session it ran on, which the pooler hands to other clients.
    """

    def __init__(self, list_key: str | None = None):
        super().__init__(list_key=list_key)
        self._listening_on = None  # the psycopg connection that LISTENs (a new one must LISTEN again)

    def enqueue_at(self, task: str, at: datetime):
        return self.get_connection().create(key=self.list_key, payload=task, lock=at).pk

    def dequeue(self):
        connection = connections[Conf.ORM]
        if settings.DATABASE_POOL_MODE == "transaction" or not transaction.get_autocommit(using=Conf.ORM):
            # Inside a transaction, a notification would wait for its end.
            return super().dequeue()
        queue = self.get_connection()  # closes a connection past its age, as django-q2's broker does
        listener = self._listen(connection)
        # Notifications that arrived while this connection did something else are stale: the
        # query below sees every task they announced. (Waiting is done on the psycopg connection
        # itself; Django's wrapper still learns of a failure, so the broken connection is replaced.)
        with connection.wrap_database_errors:
            for _ in listener.notifies(timeout=0):
                pass
        tasks = self._take_due(queue)
        if tasks:
            return tasks
        with connection.wrap_database_errors:
            for _ in listener.notifies(timeout=Conf.POLL, stop_after=1):
                pass
        return None

    def _listen(self, connection):
        """The psycopg connection under ``connection``, listening for new tasks (a new connection,
        after an old one was closed, listens again)."""
        connection.ensure_connection()
        if connection.connection is not self._listening_on:
            with connection.cursor() as cursor:
                cursor.execute(f"LISTEN {TASK_CHANNEL}")
            self._listening_on = connection.connection
        return connection.connection

    def _take_due(self, queue) -> list:
        """django-q2's ``ORM.dequeue`` without its sleep: the due tasks of ``queue`` (up to
        ``bulk``), each taken by moving its lock forward, unless another cluster moved it first."""
        taken = []
        for task in queue.filter(key=self.list_key, lock__lt=timezone.now())[: Conf.BULK]:
            if queue.filter(id=task.id, lock=task.lock).update(lock=self.timeout(task)):
                taken.append((task.pk, task.payload))
        return taken


# Moves the due members of the delayed set onto the queue in one atomic step, so two clusters
# asking at once cannot both deliver the same task.
_PROMOTE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, task in ipairs(due) do
    redis.call('ZREM', KEYS[1], task)
    redis.call('RPUSH', KEYS[2], task)
end
return #due
"""


class Redis(redis_broker.Redis):
    """Delayed tasks wait in a sorted set scored by due time; each ``dequeue`` (a cluster asks at
    least once a second) first moves the due ones onto the queue. Due times are this machine's
    clock: keep the clocks of the machines that enqueue in step, as for any schedule."""

    @property
    def delayed_key(self) -> str:
        return f"{self.list_key}:delayed"

    def enqueue_at(self, task: str, at: datetime):
        self.connection.zadd(self.delayed_key, {task: at.timestamp()})

    def dequeue(self):
        self.connection.eval(_PROMOTE_DUE, 2, self.delayed_key, self.list_key, time.time())
        return super().dequeue()

    def delete_queue(self):
        self.connection.delete(self.delayed_key)
        return super().delete_queue()

    def purge_queue(self):
        self.connection.delete(self.delayed_key)
        return super().purge_queue()
