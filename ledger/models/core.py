"""The ledger's core tables: workspaces, deliveries, operations, their attempts, configuration
versions and conflicts. Rows change only through the services (``ledger.core.transitions``,
``ledger.engine``, ``ledger.people.review`` ...)."""

from django.conf import settings
from django.core.validators import validate_slug
from django.db import models
from django.db.models import JSONField, Q, Value
from django.db.models.functions import Coalesce

from ledger import timed
from ledger.models.checks import choices_check
from ledger.states import ATTENTION_STATES, UNFINISHED_STATES, State


class Workspace(models.Model):
    slug = models.CharField(max_length=50, unique=True, validators=[validate_slug])
    approved_owners = models.JSONField(default=list, blank=True)
    retry_budget_per_hour = models.PositiveIntegerField(
        default=settings.OPSCONSOLE_RETRY_BUDGET_PER_HOUR,
        help_text="Retries the workspace may schedule per hour; when spent, retries wait.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self):
        return self.slug


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

    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="deliveries")
    operation = models.ForeignKey(
        "Operation", on_delete=models.PROTECT, null=True, blank=True, related_name="deliveries"
    )
    delivery_id = models.CharField(max_length=200, blank=True)
    correlation_id = models.CharField(max_length=200, blank=True)
    occurred_at = models.DateTimeField(null=True, blank=True, help_text="When the sender says the event happened.")
    source = models.CharField(max_length=10, choices=DeliverySource.choices)
    submitted_by = models.CharField(max_length=150, blank=True)
    # The person behind the arrival (a person's token, a replay): who authored this payload or run.
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
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
            # The admin's outcome filter, newest first. Accepted deliveries (nearly all) are not in
            # it, so intake's common insert pays nothing for it; deliveries are never updated.
            models.Index(fields=["id"], name="delivery_not_accepted_idx", condition=~Q(outcome="accepted")),
            # The console's "Find" (ledger.reads.finding): the ids a sender gave, exact. Deliveries are
            # never updated, so each costs its arrival one entry, and none without the id.
            models.Index(fields=["delivery_id"], name="delivery_sender_id_idx", condition=~Q(delivery_id="")),
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


class Operation(models.Model):
    """One business action, unique per (workspace, key)."""

    # No index of its own: operation_unique_key (workspace, key) leads with it.
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="operations", db_index=False)
    action = models.CharField(max_length=100)
    key = models.TextField()
    key_recipe = models.PositiveSmallIntegerField()
    definition_version = models.CharField(max_length=16)
    fingerprint = models.CharField(max_length=64)
    payload = models.JSONField()
    correlation_id = models.CharField(max_length=200, blank=True)
    submitted_by = models.CharField(max_length=150, blank=True)
    # Versions of one request under an ordering policy (ledger.intake.ordering), set at reservation when
    # the action's policy was latest_wins or in_order: the request's key without its version, the
    # version, and that policy. Blank for independent versions (nearly all), which no index pays for.
    series = models.TextField(blank=True)
    version = models.PositiveIntegerField(null=True, blank=True)
    ordered = models.CharField(max_length=20, blank=True)

    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # pending/retrying: when the next try is due. unknown: when the next lookup at the destination is.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # pending_approval: when the approval request expires. Otherwise: the processing deadline, not
    # counting the pauses that ended since state_changed_at (given at the next claim:
    # ledger.core.held_time).
    deadline = models.DateTimeField(null=True, blank=True)
    # When the state last moved (null: not since created_at). Written by every move
    # (ledger.core.transitions), which rewrites the row anyway.
    state_changed_at = models.DateTimeField(null=True, blank=True)

    # The lease of the worker that claimed it; the fencing token grows with every claim, and an
    # outcome is recorded only while the token it was claimed with still matches.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_token = models.PositiveBigIntegerField(default=0)

    last_error_category = models.CharField(max_length=20, blank=True)
    last_error_message = models.CharField(max_length=500, blank=True)
    # The times last_error_message names as {name} (ledger.timed): read only with that message.
    last_error_times = models.JSONField(null=True, blank=True, default=None)
    result = models.JSONField(null=True, blank=True)
    external_id = models.CharField(max_length=200, blank=True)
    # When retention replaced the payload and result of this finished operation by its tombstone
    # (identity and references only; ledger.retention). The key and fingerprint stay.
    redacted_at = models.DateTimeField(null=True, blank=True)

    # Who took it in the console, so two people do not work the same one (ledger.people.assignment);
    # a marker, not a lock: anyone who may act still can. Null for nearly every row.
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    assigned_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "key"], name="operation_unique_key"),
            models.CheckConstraint(condition=choices_check("state", State.choices), name="operation_state_valid"),
        ]
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="operation_due_idx"),
            # The claim (ledger.engine.claiming): the oldest claimable operations, in arrival order, read
            # along this index up to the batch without sorting the whole backlog, and without
            # walking the primary key through every finished operation older than it; and the age
            # of the oldest due one (ledger.core.selectors), from its first entries. Partial: a row
            # leaves it when it is claimed.
            models.Index(
                fields=["created_at", "id"],
                name="operation_claim_order_idx",
                condition=Q(state__in=[State.PENDING, State.RETRYING]),
            ),
            # Per action, the due operations by the time they became due (arrival, or the next
            # attempt a retry put them off to): the longest-waiting due one of an action is the
            # first entry of its range that is due (/metrics, ledger.core.selectors).
            models.Index(
                "action",
                Coalesce("next_attempt_at", "created_at"),
                name="operation_due_since_idx",
                condition=Q(state__in=[State.PENDING, State.RETRYING]),
            ),
            # Per action, the unfinished operations by arrival: the service-levels page counts and
            # lists those past a time along it, however large the backlog (ledger.core.selectors).
            models.Index(
                fields=["action", "created_at", "id", "workspace"],
                name="operation_unfinished_idx",
                condition=Q(state__in=sorted(UNFINISHED_STATES)),
            ),
            # The console's queue: the operations that need a person, most recently changed first.
            # Partial, so the rows of every other state (nearly all of them) cost it nothing.
            models.Index(
                fields=["updated_at", "id"],
                name="operation_attention_idx",
                condition=Q(state__in=list(ATTENTION_STATES)),
            ),
            # Its other orders (migration 0020): by arrival, and within one state by either time,
            # both ways; and the per-state counts, with their workspace and action filters, read
            # from the index alone.
            models.Index(
                fields=["created_at", "id"], name="operation_arrival_idx", condition=Q(state__in=list(ATTENTION_STATES))
            ),
            models.Index(
                fields=["state", "updated_at", "id"],
                name="operation_state_updated_idx",
                condition=Q(state__in=list(ATTENTION_STATES)),
            ),
            models.Index(
                fields=["state", "created_at", "id"],
                name="operation_state_arrival_idx",
                condition=Q(state__in=list(ATTENTION_STATES)),
            ),
            models.Index(
                fields=["state", "action", "workspace"],
                name="operation_state_count_idx",
                condition=Q(state__in=list(ATTENTION_STATES)),
            ),
            # "Assigned to me": the few operations someone took (partial: the others cost it nothing).
            models.Index(
                fields=["assigned_to", "updated_at", "id"],
                name="operation_assigned_idx",
                condition=Q(assigned_to__isnull=False),
            ),
            # The versions of one request (ledger.intake.ordering), for the operations that have a series.
            models.Index(
                fields=["workspace", "series", "version"], name="operation_series_idx", condition=~Q(series="")
            ),
            # Search by the destination's record id (the console's find box, queue and audit search):
            # set when the operation succeeds, so rows still changing state (none yet) are not in it.
            models.Index(fields=["external_id"], name="operation_external_id_idx", condition=~Q(external_id="")),
            # Failure groups (ledger.reads.failure_groups): the operations that need review, by how they failed,
            # counted from this index alone (an index-only scan, in the order of the grouping), and
            # one group's operations found along it (the queue's group filter, a bulk action's).
            models.Index(
                fields=["action", "last_error_category", "last_error_message", "workspace", "updated_at"],
                name="operation_failure_idx",
                condition=Q(state=State.NEEDS_REVIEW),
            ),
        ]
        # Also, in migration 0007_scale_indexes: search by any part of the request
        # id (trigram, UPPER(payload->>'request_id')) and by the start of the key (UPPER(key)).

    def __str__(self):
        return self.key

    @property
    def last_error(self) -> dict | None:
        if not self.last_error_category:
            return None
        # As the API answers it: its times in ISO 8601 with their offset (ledger.timed).
        return {
            "category": self.last_error_category,
            "message": timed.as_iso(self.last_error_message, self.last_error_times),
        }

    def approved_as_is(self) -> bool:
        """Whether the latest approval decision approved this payload as it is now, by a person who
        neither submitted, changed nor replayed the operation (four eyes)."""
        from ledger.models.people import ApprovalDecision

        latest = self.approvals.order_by("-id").first()
        return (
            latest is not None
            and latest.decision == ApprovalDecision.APPROVED
            and latest.fingerprint == self.fingerprint
            and not self.contributions.filter(user__username=latest.approver).exists()
        )


class AttemptOutcome(models.TextChoices):
    OK = "ok"
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    AMBIGUOUS = "ambiguous"
    STALE = "stale"  # the worker lost its claim before it could record the outcome
    ABANDONED = "abandoned"  # the worker died; the sweep found the lease expired


class ConfigVersion(models.Model):
    """One configuration an action ran under, stored once (content-addressed by ``digest``): its
    definition, destination, timeouts, settle time, sensitive fields and the workspace's policy
    (``ledger.core.configuration``). Each attempt names the one it ran under, so a replay can show what
    changed since."""

    # The SHA-256 of the content's canonical JSON: the same configuration is the same row, which
    # any transaction may insert (ON CONFLICT DO NOTHING) without asking first.
    digest = models.CharField(max_length=64, primary_key=True)
    action = models.CharField(max_length=100)
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.action} {self.digest[:12]}"


class Attempt(models.Model):
    """One try at an operation's effect, begun under one claim (fencing token)."""

    Outcome = AttemptOutcome

    operation = models.ForeignKey("Operation", on_delete=models.PROTECT, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    fencing_token = models.PositiveBigIntegerField()
    worker = models.CharField(max_length=200, blank=True)
    idempotency_key = models.TextField(blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=10, choices=AttemptOutcome.choices, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    error_message = models.CharField(max_length=500, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # What the destination answered a refused or failed try (``ledger.outcomes.Answer``): its own
    # error code, a few headers and the body up to 4 KiB, sensitive values and secrets masked.
    # Defaults in the database too: the SQL that writes attempts in bulk names only the columns it sets.
    error_code = models.CharField(max_length=80, blank=True, default="", db_default="")
    response_headers = models.JSONField(default=dict, db_default=Value({}, JSONField()), blank=True)
    response_body = models.TextField(blank=True, default="", db_default="")
    # Whether that answer was masked after decoding (``ledger.core.vendor_text``). Those kept
    # before were masked for the literal credential only: ``privacy.answer_shown_to`` shows them
    # to superusers alone.
    answer_masked_decoded = models.BooleanField(default=True, db_default=True)
    # The destination's record id, when it answered with one (kept even on a stale attempt).
    external_id = models.CharField(max_length=200, blank=True)
    # A caller-performed try (ledger.callers): the digest of the outcome its caller reported, so the
    # same report sent again is answered as it was, and a different one under the same claim refused.
    report = models.CharField(max_length=64, blank=True)
    # No index: nothing looks attempts up by it (and configurations are never deleted), while
    # every attempt would pay for one.
    config_version = models.ForeignKey(
        ConfigVersion, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )

    class Meta:
        ordering = ["operation", "number"]
        indexes = [
            # The admin's outcome filter, newest first, for the outcomes worth looking for (ok and
            # running are nearly all rows, and are read newest first along the primary key).
            models.Index(fields=["id"], name="attempt_not_ok_idx", condition=~Q(outcome__in=["", "ok"])),
            # Search by the destination's record id (console): also the ids of tries whose outcome
            # could not be recorded (stale), which their operation never got.
            models.Index(fields=["external_id"], name="attempt_external_id_idx", condition=~Q(external_id="")),
        ]
        constraints = [
            # One try per claim: a worker that lost its claim cannot begin another try under it.
            models.UniqueConstraint(fields=["operation", "fencing_token"], name="attempt_one_per_claim"),
            models.CheckConstraint(
                condition=Q(outcome="") | choices_check("outcome", AttemptOutcome.choices),
                name="attempt_outcome_valid",
            ),
        ]

    def __str__(self):
        return f"{self.operation_id} #{self.number} {self.outcome or 'running'}"

    @property
    def duration_ms(self) -> int | None:
        if self.finished_at is None:
            return None
        return int((self.finished_at - self.started_at).total_seconds() * 1000)


class ConflictStatus(models.TextChoices):
    OPEN = "open"
    DISMISSED = "dismissed"
    APPLIED = "applied"


class Conflict(models.Model):
    """A delivery that reused a key with a different payload: blocked and queued for review."""

    Status = ConflictStatus

    operation = models.ForeignKey("Operation", on_delete=models.PROTECT, related_name="conflicts")
    delivery = models.OneToOneField("Delivery", on_delete=models.PROTECT, related_name="conflict")
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
