"""The ledger's core tables: workspaces and their operations. Rows change only through the services
(``ledger.core.transitions``, ``ledger.engine``, ``ledger.people.review`` ...)."""

from django.conf import settings
from django.core.validators import validate_slug
from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce

from ledger import timed
from ledger.models.checks import choices_check
from ledger.states import ATTENTION_STATES, UNFINISHED_STATES, State

# The most audit lanes a workspace may have (the lock keys hold a lane in one byte).
MAX_AUDIT_LANES = 64


class Workspace(models.Model):
    slug = models.CharField(max_length=50, unique=True, validators=[validate_slug])
    approved_owners = models.JSONField(default=list, blank=True)
    retry_budget_per_hour = models.PositiveIntegerField(
        default=settings.OPSCONSOLE_RETRY_BUDGET_PER_HOUR,
        help_text="Retries the workspace may schedule per hour; when spent, retries wait.",
    )
    # How many audit chains (lanes) its events are spread over, by a stable hash of their operation
    # (ledger.core.audit_chain): each lane has its own lock, so a large tenant's appends are not all
    # serialised on one. Changed by ``accounts.set_audit_lanes`` (audited); any number stays correct.
    audit_lanes = models.PositiveSmallIntegerField(
        default=1,
        db_default=1,
        help_text="Audit chains its events are spread over (1 to 64): more lets more appends run at once.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(audit_lanes__gte=1, audit_lanes__lte=MAX_AUDIT_LANES),
                name="workspace_audit_lanes_range",
            )
        ]

    def __str__(self):
        return self.slug


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
            # By state, every operation but the succeeded ones (nearly all of the table, which no
            # query reads by state): the sweep's expired leases (ledger.sweep, processing), the
            # console queue's counts per state (opsconsole.console.tables.bounded_counts), /metrics'
            # unfinished operations (opsconsole.metrics), the API's list of one state. Partial, so an
            # operation's move to succeeded writes no entry here (migration 0064).
            models.Index(
                fields=["state", "next_attempt_at"], name="operation_state_idx", condition=~Q(state=State.SUCCEEDED)
            ),
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
            # both ways; and the per-state counts, with their workspace, action and age filters,
            # read from the index alone (with the age too since migration 0069: a member's "older
            # than 24 hours" read each row for its arrival, 126 ms at 5,000,000 operations).
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
                fields=["state", "action", "workspace", "created_at"],
                name="operation_state_count_age_idx",
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
        # id (trigram, UPPER(payload->>'request_id')) and by the start of the key (UPPER(key)): the
        # console's find box, the queue's and the API's `q` (ledger.reads.work_lists.key_or_request_id).

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
