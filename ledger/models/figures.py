"""The dashboard's samples (``ledger.reads.dashboard``): what the sweep counted, per workspace, written
insert-only (autovacuum may be off: a row is never updated, so it never leaves a dead version) and
forgotten by the purge after ``dashboard.KEEP``."""

from django.db import models


class FlowSample(models.Model):
    """What one workspace's operations of one action did over ``[since, until)``, an interval within
    one hour: attempts that ended (and of them, those that failed) and operations that reached each
    final state, counted from the audit trail. A row exists only where something happened."""

    # No index of its own: the dashboard reads every workspace's rows of the last hours at once.
    workspace = models.ForeignKey("ledger.Workspace", on_delete=models.PROTECT, related_name="+", db_index=False)
    action = models.CharField(max_length=100)  # blank: the operation is gone (purged)
    hour = models.DateTimeField()  # the start of the hour the interval lies in
    since = models.DateTimeField()
    until = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    superseded = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["hour"], name="flow_sample_hour_idx")]

    def __str__(self):
        return f"{self.workspace_id} {self.action} {self.since:%H:%M}-{self.until:%H:%M}"


class BacklogSample(models.Model):
    """How many of one workspace's operations were unfinished at ``at`` (one row per workspace per
    sample, 0 too: a missing row means that nobody looked, not that nothing waited)."""

    workspace = models.ForeignKey("ledger.Workspace", on_delete=models.PROTECT, related_name="+", db_index=False)
    at = models.DateTimeField()
    unfinished = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["at"], name="backlog_sample_at_idx")]

    def __str__(self):
        return f"{self.workspace_id} at {self.at:%H:%M}: {self.unfinished}"
