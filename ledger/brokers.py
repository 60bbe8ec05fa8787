"""django-q2 brokers that can also deliver a task later (django-q2 has no delay of its own).

A retry due in 40 seconds should run in 40 seconds, not when the one-minute sweep next looks.
``settings.Q_CLUSTER["broker_class"]`` names one of these; ``ledger.nudges.enqueue_at`` uses
``enqueue_at``. A delayed task that is lost (a Redis restart) costs only time: the sweep still
re-drives whatever is due.
"""

import time
from datetime import datetime

from django_q.brokers import orm, redis_broker


class ORM(orm.ORM):
    """The ORM broker already hides a row until its ``lock`` time passes (that is how it re-delivers
    a task whose worker died), so a delayed task is a row locked until it is due."""

    def enqueue_at(self, task: str, at: datetime):
        return self.get_connection().create(key=self.list_key, payload=task, lock=at).pk


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
