"""Bulk actions and their items: one person's replay, cancel or lookup of many operations with one reason, run by
a task (``ledger.people.bulk_actions``), and what became of each operation."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from ledger.models.checks import choices_check


class BulkKind(models.TextChoices):
    REPLAY = "replay"
    CANCEL = "cancel"
    # Ask the destination by key, change nothing (the reconciliation mismatches' "look up first").
    LOOKUP = "lookup"


class BulkStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


class BulkAction(models.Model):
    """The operations are frozen at submission (``operation_ids``): a group that grows afterwards
    does not grow the action. The counts are written once per chunk, not per operation, so a
    run over thousands leaves few dead rows; each operation's outcome is a ``BulkItem`` of its own."""

    Kind = BulkKind
    Status = BulkStatus

    kind = models.CharField(max_length=10, choices=BulkKind.choices)
    reason = models.CharField(max_length=500)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # The form's one-time token: a second press of the same form finds this action, not a new one.
    token = models.CharField(max_length=64)
    accept_duplicate_risk = models.BooleanField(default=False)
    accept_config_change = models.BooleanField(default=False)
    # The failure group it was submitted for ("action|category|message"), blank for a selection.
    criterion = models.TextField(blank=True)
    operation_ids = models.JSONField()
    total = models.PositiveIntegerField()
    done = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=BulkStatus.choices, default=BulkStatus.QUEUED)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["token"], name="bulk_action_unique_token"),
            models.CheckConstraint(condition=choices_check("kind", BulkKind.choices), name="bulk_action_kind_valid"),
            models.CheckConstraint(
                condition=choices_check("status", BulkStatus.choices), name="bulk_action_status_valid"
            ),
            models.CheckConstraint(condition=~Q(reason=""), name="bulk_action_reason_given"),
            models.CheckConstraint(condition=Q(total__gt=0), name="bulk_action_not_empty"),
            models.CheckConstraint(
                condition=Q(done__lte=F("total") - F("skipped") - F("failed")), name="bulk_action_counts_within_total"
            ),
            # Finished exactly when every operation has its outcome.
            models.CheckConstraint(
                condition=Q(
                    status=BulkStatus.FINISHED, finished_at__isnull=False, done=F("total") - F("skipped") - F("failed")
                )
                | (~Q(status=BulkStatus.FINISHED) & Q(finished_at__isnull=True)),
                name="bulk_action_finished_when_all_done",
            ),
        ]

    def __str__(self):
        return f"{self.kind} of {self.total} by {self.user_id} ({self.status})"

    @property
    def processed(self) -> int:
        return self.done + self.skipped + self.failed


class BulkOutcome(models.TextChoices):
    REPLAYED = "replayed"  # it runs again
    FORCED = "forced"  # it runs again although the destination could not tell (accepted)
    FOUND = "found"  # the destination had the record: succeeded (a lookup: as it was), nothing sent
    CANCELLED = "cancelled"
    ABSENT = "absent"  # a lookup: the destination has no record of it (nothing was sent)
    SKIPPED = "skipped"  # refused by review, or a lookup the destination could not answer (the reason says why)
    FAILED = "failed"  # an unexpected error; nothing was done


class BulkItem(models.Model):
    """What a bulk action did to one of its operations; written once, never changed. Its presence
    is what a run that starts again skips."""

    Outcome = BulkOutcome

    bulk_action = models.ForeignKey(BulkAction, on_delete=models.CASCADE, related_name="items", db_index=False)
    # No database constraint: retention may purge a finished operation, and what was done to it stays.
    operation = models.ForeignKey(
        "ledger.Operation", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    outcome = models.CharField(max_length=10, choices=BulkOutcome.choices)
    detail = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["bulk_action", "id"]
        constraints = [
            # One outcome per operation; also the index of the progress page's reads.
            models.UniqueConstraint(fields=["bulk_action", "operation"], name="bulk_item_once"),
            models.CheckConstraint(
                condition=choices_check("outcome", BulkOutcome.choices), name="bulk_item_outcome_valid"
            ),
        ]
        indexes = [
            # The progress page's list of outcomes, newest first (keyset pages).
            models.Index(fields=["bulk_action", "created_at", "id"], name="bulk_item_page_idx"),
        ]

    def __str__(self):
        return f"{self.bulk_action_id}: {self.operation_id} {self.outcome}"
