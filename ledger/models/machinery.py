"""The engine's bookkeeping: pause switches, heartbeats of the sweep and the purge, destination
health and slots, the tallies /metrics reads, and the coalesced wake-up of the worker cluster."""

from django.db import models
from django.db.models import Q


class Control(models.Model):
    """A pause switch. Scope: no workspace and no action is global; either or both narrow it."""

    workspace = models.ForeignKey("Workspace", on_delete=models.CASCADE, null=True, blank=True, related_name="controls")
    action = models.CharField(max_length=100, blank=True)
    paused = models.BooleanField(default=False)
    # When the switch was last pulled: resuming keeps the time since as a PauseInterval.
    paused_since = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    changed_by = models.CharField(max_length=150, blank=True)
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # Partial unique indexes: one switch per scope, with or without a workspace.
            models.UniqueConstraint(
                fields=["action"], condition=Q(workspace__isnull=True), name="control_unique_unscoped"
            ),
            models.UniqueConstraint(
                fields=["workspace", "action"],
                condition=Q(workspace__isnull=False),
                name="control_unique_workspace",
            ),
        ]

    def __str__(self):
        return f"{self.scope_label}: {'paused' if self.paused else 'running'}"

    @property
    def scope_label(self) -> str:
        parts = [
            f"workspace {self.workspace.slug}" if self.workspace is not None else "",
            f"action {self.action}" if self.action else "",
        ]
        return ", ".join(p for p in parts if p) or "global"


class PauseInterval(models.Model):
    """The time one switch held its scope, written when it is released (``ledger.core.held_time``).

    Held time does not count against a processing deadline: an operation is given the intervals
    that ended since its state last changed when it is next claimed, which rewrites its row anyway,
    so a resume writes this one row, not every operation it held. Kept for as long as a held
    operation may wait: a few rows a year."""

    workspace = models.ForeignKey("Workspace", on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    action = models.CharField(max_length=100, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["ended_at"], name="pauseinterval_ended_idx")]
        constraints = [
            models.CheckConstraint(condition=Q(ended_at__gte=models.F("started_at")), name="pauseinterval_ordered")
        ]

    def __str__(self):
        return f"{self.workspace_id or '-'} {self.action or '-'} {self.started_at} - {self.ended_at}"


class Heartbeat(models.Model):
    """When a periodic job last ran: the ledger's own liveness signal for the worker cluster."""

    name = models.CharField(max_length=50, unique=True)
    beat_at = models.DateTimeField()
    detail = models.JSONField(default=dict, blank=True)

    def __str__(self):
        return f"{self.name} at {self.beat_at:%Y-%m-%d %H:%M:%S}"


class DestinationHealth(models.Model):
    """How the last batches that met a destination (or an internal action) fared, for the whole
    cluster: a batch for one that is working goes wide at once (``ledger.engine.destination_health``). Written at most
    once per ``health.RESOLUTION`` per destination and outcome, so it leaves few dead rows."""

    name = models.CharField(max_length=300, primary_key=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    # The limits of a destination that declares them (``ledger.engine.limits``), for the whole
    # cluster. Pacing: the earliest moment the next call may begin (each call takes the next free
    # moment, 1/rate apart). The circuit breaker: transient failures in a row; while
    # ``breaker_until`` lies ahead calls are paused (open), or, with ``probing``, one probe call is in
    # flight; once it has passed a probe may be taken; no ``breaker_until``: closed.
    next_call_at = models.DateTimeField(null=True, blank=True)
    failures_in_row = models.PositiveIntegerField(default=0)
    breaker_until = models.DateTimeField(null=True, blank=True)
    probing = models.BooleanField(default=False)

    class Meta:
        verbose_name_plural = "destination health"

    def __str__(self):
        return self.name

    @staticmethod
    def row_of(destination: str) -> str:
        """The name of the row of the destination called ``destination``
        (``ActionDefinition.destination_name``)."""
        return f"destination:{destination}"

    def breaker(self, now) -> str:
        """The circuit breaker as people read it: closed, open (calls paused), probing (one call
        deciding) or probe due (the pause is over; the next call is the probe)."""
        if self.breaker_until is None:
            return "closed"
        if self.breaker_until <= now:
            return "probe due"
        return "probing" if self.probing else "open"


class DestinationSlot(models.Model):
    """One of a destination's slots for calls in flight, leased (``ledger.engine.limits``), behind a
    pooler in transaction mode only: elsewhere a slot is a session's advisory lock, which writes
    nothing, but there it would stay with whichever server session took it. A lease lasts a task's
    timeout (the cluster ends a task that runs longer), so a dead worker's slot comes back then."""

    name = models.CharField(max_length=300)  # the destination's DestinationHealth row
    slot = models.PositiveIntegerField()
    holder = models.CharField(max_length=64, blank=True)  # the Gate that holds it, so it lets go of its own only
    held_until = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "slot"], name="destinationslot_one_row_per_slot")]

    def __str__(self):
        return f"{self.name} #{self.slot}"


class Tally(models.Model):
    """A counter the workers keep for /metrics (``ledger.core.tallies``): attempts by outcome, finished
    operations by how long they took. One row per counter, label set and process (``shard``), so
    that two workers never wait for each other's row; a scrape sums the shards."""

    name = models.CharField(max_length=100)
    labels = models.CharField(max_length=500)  # canonical JSON of the label values
    shard = models.CharField(max_length=200)
    value = models.FloatField(default=0)

    class Meta:
        verbose_name_plural = "tallies"
        constraints = [models.UniqueConstraint(fields=["name", "labels", "shard"], name="tally_unique")]

    def __str__(self):
        return f"{self.name}{self.labels} {self.value}"


class Wakeup(models.Model):
    """A wake-up of the worker cluster that is pending: a processing task was enqueued and has not
    started yet. Intake enqueues a task only when there is none (``ledger.core.nudges``), so a stream
    of events costs one queue row per task that runs, not one per event."""

    name = models.CharField(max_length=50, primary_key=True)
    requested_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"wake-up {self.name} pending since {self.requested_at:%H:%M:%S}"
