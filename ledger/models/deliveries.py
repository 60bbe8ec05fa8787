"""What arrived: every delivery (an HTTP request, a command-line line, a replay, a signed webhook),
whatever became of it, and the conflicts a delivery that reused a key with another payload opened.
Rows change only through the services (``ledger.intake``, ``ledger.people.conflicts``)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from ledger.models.checks import choices_check
from ledger.models.core import Workspace


class DeliverySource(models.TextChoices):
    API = "api"
    CLI = "cli"
    REPLAY = "replay"
    WEBHOOK = "webhook"  # a signed delivery of a Source (ledger.integrations.sources)


class DeliveryOutcome(models.TextChoices):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    INVALID = "invalid"
    STALE = "stale"
    IGNORED = "ignored"  # a signed webhook whose event type no rule of its Source maps


# Arrivals that did not become work: every outcome but a new operation and a repeat of one.
REFUSED_OUTCOMES = [DeliveryOutcome.CONFLICT, DeliveryOutcome.INVALID, DeliveryOutcome.STALE]


class Delivery(models.Model):
    """One transport arrival (an HTTP request, a command-line line, a replay), whatever became of it."""

    Source = DeliverySource

    Outcome = DeliveryOutcome

    # No index of its own (migration 0057): a workspace is never deleted (the admin's are read-only,
    # no code deletes one), and the per-workspace reads go through delivery_refused_ws_time_idx.
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="deliveries", db_index=False)
    operation = models.ForeignKey(
        "Operation", on_delete=models.PROTECT, null=True, blank=True, related_name="deliveries"
    )
    # The id the sender gave the delivery (the envelope's ``delivery_id``), not a row of ours. Its
    # column keeps the name it had before the field was renamed (migration 0050): processes of the
    # release before keep working while a deploy migrates.
    sender_delivery_id = models.CharField(max_length=200, blank=True, db_column="delivery_id")
    correlation_id = models.CharField(max_length=200, blank=True)
    occurred_at = models.DateTimeField(null=True, blank=True, help_text="When the sender says the event happened.")
    source = models.CharField(max_length=10, choices=DeliverySource.choices)
    submitted_by = models.CharField(max_length=150, blank=True)
    # The person behind the arrival (a person's token, a replay): who authored this payload or run.
    # Indexed only where set (delivery_person_idx): a service token's deliveries cost it nothing.
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )
    action = models.CharField(max_length=100, blank=True)
    key = models.TextField(blank=True)
    outcome = models.CharField(max_length=10, choices=DeliveryOutcome.choices)
    # [{"field": ..., "message": ...}]: messages only, never the submitted values.
    errors = models.JSONField(default=list, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-received_at", "-id"]
        indexes = [
            # A person's deletion (the admin's User delete, by hand; offboarding deactivates): Django's
            # PROTECT check (``person_id IN (..)``) and the foreign key's at commit read it, instead of
            # reading every delivery twice. Partial: the deliveries of service tokens (no person) are
            # not in it.
            models.Index(fields=["person"], name="delivery_person_idx", condition=Q(person__isnull=False)),
            # The admin's outcome filter, newest first. Accepted deliveries (nearly all) are not in
            # it, so intake's common insert pays nothing for it; deliveries are never updated.
            models.Index(fields=["id"], name="delivery_not_accepted_idx", condition=~Q(outcome="accepted")),
            # The console's "Find" (ledger.reads.finding): the ids a sender gave, exact. Deliveries are
            # never updated, so each costs its arrival one entry, and none without the id.
            models.Index(
                fields=["sender_delivery_id"], name="delivery_sender_id_idx", condition=~Q(sender_delivery_id="")
            ),
            models.Index(fields=["correlation_id"], name="delivery_correlation_idx", condition=~Q(correlation_id="")),
            # The console's deliveries page, newest first, overall, per outcome and per workspace:
            # only the refused arrivals are in them (accepted ones, nearly all, cost intake nothing).
            models.Index(
                fields=["received_at", "id"],
                name="delivery_refused_time_idx",
                condition=Q(outcome__in=REFUSED_OUTCOMES),
            ),
            models.Index(
                fields=["outcome", "received_at", "id"],
                name="delivery_refused_outcome_idx",
                condition=Q(outcome__in=REFUSED_OUTCOMES),
            ),
            models.Index(
                fields=["workspace", "received_at", "id"],
                name="delivery_refused_ws_time_idx",
                condition=Q(outcome__in=REFUSED_OUTCOMES),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=choices_check("outcome", DeliveryOutcome.choices), name="delivery_outcome_valid"
            ),
            models.CheckConstraint(
                condition=choices_check("source", DeliverySource.choices), name="delivery_source_valid"
            ),
        ]

    def __str__(self):
        return f"{self.outcome} {self.key or self.action or '-'}"


class ConflictStatus(models.TextChoices):
    OPEN = "open"
    DISMISSED = "dismissed"
    APPLIED = "applied"


class Conflict(models.Model):
    """A delivery that reused a key with a different payload: blocked and queued for review."""

    Status = ConflictStatus

    operation = models.ForeignKey("Operation", on_delete=models.PROTECT, related_name="conflicts")
    # The database's foreign key is on (delivery_id, operation_id), the deliveries' unique pair
    # (they are partitioned by operation: migration 0068); a conflict's delivery is its operation's.
    delivery = models.OneToOneField("Delivery", on_delete=models.PROTECT, related_name="conflict", db_constraint=False)
    incoming_fingerprint = models.CharField(max_length=64)
    incoming_payload = models.JSONField()
    # [{"field": ..., "recorded": ..., "incoming": ...}] for every business field that differs.
    differences = models.JSONField()
    status = models.CharField(max_length=10, choices=ConflictStatus.choices, default=ConflictStatus.OPEN)
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The open conflicts (the conflicts inbox, by operation; the queue's count; retention's
            # "no open conflict"): partial, so the decided ones, nearly all, cost it nothing.
            models.Index(fields=["operation", "id"], name="conflict_open_idx", condition=Q(status="open")),
        ]
        constraints = [
            models.CheckConstraint(
                condition=choices_check("status", ConflictStatus.choices), name="conflict_status_valid"
            ),
            # A decided conflict says who decided and when; an open one has neither.
            models.CheckConstraint(
                condition=Q(status=ConflictStatus.OPEN, decided_at__isnull=True)
                | (~Q(status=ConflictStatus.OPEN) & Q(decided_at__isnull=False) & ~Q(decided_by="")),
                name="conflict_decision_recorded",
            ),
        ]

    def __str__(self):
        return f"conflict on {self.operation.key}"
