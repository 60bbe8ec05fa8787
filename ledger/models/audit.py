"""The append-only audit trail (written through ``ledger.core.audit_chain.append``, which chains it)."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Upper
from django.utils import timezone

from ledger.states import TERMINAL_STATES, State

# The events the dashboard counts (ledger.reads.dashboard): an attempt that ended (out of
# processing) or an operation that reached a final state. One expression for the reads and the
# partial index below, so that PostgreSQL sees that the index answers them.
FLOW_EVENTS = Q(from_state=State.PROCESSING) | Q(to_state__in=[state for state in State if state in TERMINAL_STATES])


def current_audit_key_id() -> str:
    """The id of the key new events are hashed under (``OPSCONSOLE_AUDIT_KEY_ID``)."""
    return settings.OPSCONSOLE_AUDIT_KEY_ID


# Every kind of audit event the code writes, by topic (the console's Kind filter offers these, so it
# need not read the kinds off a trail of millions of rows). tests/ledger/core/test_audit_kinds.py finds the
# kinds in the code, Python and SQL, and fails when the code and this list disagree: a new kind goes here.
AUDIT_KIND_GROUPS = {
    "Operations: intake, workers, sweep": (
        "reserved",
        "duplicate_delivery",
        "conflict_detected",
        "superseded",
        "version_missing",
        "claimed",
        "succeeded",
        "retry_scheduled",
        "outcome_unknown",
        "needs_review",
        "held",
        "lease_expired",
        "deadline_passed",
        "stale_completion_refused",
        "breaker_opened",
        "breaker_closed",
    ),
    "Reconciliation: lookups and the two-way audit": (
        "reconciled_found",
        "reconciled_absent",
        "reconciliation_inconclusive",
        "lookup_failed",
        "mismatch_found",
        "mismatch_acknowledged",
        "reopened_missing",
        "looked_up",
    ),
    "People's decisions": (
        "approval_approved",
        "approval_rejected",
        "approval_expired",
        "replayed",
        "replay_forced",
        "replay_refused",
        "reconciled_on_replay",
        "reconciled_on_cancel",
        "resolved",
        "cancelled",
        "conflict_applied",
        "conflict_dismissed",
        "conflict_held",
        "conflict_released",
        "taken",
        "taken_over",
        "assigned",
        "released",
        "bulk_submitted",
    ),
    "Workspaces, people and configuration": (
        "workspace_created",
        "paused",
        "resumed",
        "token_issued",
        "token_revoked",
        "token_scopes_changed",
        "member_added",
        "member_role_changed",
        "member_removed",
        "person_deactivated",
        "policy_changed",
        "audit_lanes_changed",
        "source_created",
        "source_changed",
        "destination_created",
        "destination_changed",
        "http_action_created",
        "http_action_changed",
        "subscription_created",
        "subscription_changed",
    ),
    "Retention and privacy": (
        "purged",
        "erased",
    ),
}
AUDIT_KINDS = tuple(kind for kinds in AUDIT_KIND_GROUPS.values() for kind in kinds)


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("Audit events are append-only.")

    def delete(self):
        raise PermissionError("Audit events are append-only.")


class AuditEvent(models.Model):
    """Append-only history: updates and deletes are refused here and by database triggers."""

    # No database constraint on operation and attempt: the events outlive what they describe. When
    # retention deletes an operation's tombstone (ledger.retention) its events stay, chained as they
    # were, naming an operation id that no longer exists.
    operation = models.ForeignKey(
        "ledger.Operation",
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        related_name="audit_events",
        db_constraint=False,
    )
    # No index of its own: audit_chain_idx (workspace, id) leads with it.
    workspace = models.ForeignKey(
        "ledger.Workspace",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="audit_events",
        db_index=False,
    )
    # No index: nothing reads events by attempt, and with no constraint and DO_NOTHING neither
    # PostgreSQL nor Django's collector looks here when retention deletes attempts (migration 0057).
    attempt = models.ForeignKey(
        "ledger.Attempt", on_delete=models.DO_NOTHING, null=True, blank=True, db_constraint=False, db_index=False
    )
    actor = models.CharField(max_length=150)
    kind = models.CharField(max_length=40)
    from_state = models.CharField(max_length=20, blank=True)
    to_state = models.CharField(max_length=20, blank=True)
    error_category = models.CharField(max_length=20, blank=True)
    # Never payload text: a state, a reason, a field name.
    message = models.CharField(max_length=500, blank=True)
    # The times the message names as {name}, ISO 8601 in UTC by name (ledger.timed), so that each
    # reader shows them in its zone; null for none (and for every event written before they were kept
    # apart, whose message holds its times as words). Covered by the MAC (ledger.core.audit_mac).
    times = models.JSONField(null=True, blank=True, default=None)
    # Set before the hash is computed (not auto_now_add, which would overwrite it on insert).
    created_at = models.DateTimeField(default=timezone.now)
    # The workspace's hash chain (ledger.core.audit_chain): this event's hash, and the one before it.
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)
    # The id of the audit key the hash is an HMAC under; "" for the events hashed before keys
    # (migration 0030), whose hash is the unkeyed SHA-256 of the same encoding.
    hash_key = models.CharField(max_length=16, blank=True, default=current_audit_key_id)
    # Which of its workspace's chains it is on (Workspace.audit_lanes): its operation's lane
    # (ledger.core.audit_chain), 0 for an event of no operation and for every event of a one-lane
    # workspace. A chain is (workspace, lane). Covered by the MAC when not 0 (ledger.core.audit_mac).
    lane = models.PositiveSmallIntegerField(default=0, db_default=0)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["workspace", "kind", "created_at"], name="audit_workspace_kind_time_idx"),
            models.Index(fields=["workspace", "id"], name="audit_chain_idx"),  # each chain's head, in order
            # The lanes past the first (of the workspaces that have them), each in order: their heads,
            # and verification finding every lane there is. Partial: empty where no workspace has
            # more than one lane.
            models.Index(fields=["workspace", "lane", "id"], condition=~Q(lane=0), name="audit_lane_idx"),
            # The audit lists, newest first (and their date filters and keyset pages), overall and by kind.
            models.Index(fields=["created_at", "id"], name="audit_time_idx"),
            models.Index(fields=["kind", "created_at", "id"], name="audit_kind_time_idx"),
            # The console's actor filter: a name, in any case (iexact is UPPER(actor) = UPPER(name)).
            models.Index(Upper("actor"), F("created_at"), F("id"), name="audit_actor_time_idx"),
            # The dashboard's flows, newest first: its live last hour reads a bounded range of it,
            # whatever else the trail holds (claims, duplicate deliveries), and the sweep's samples.
            models.Index(fields=["created_at", "id"], condition=FLOW_EVENTS, name="audit_flow_time_idx"),
        ]

    def __str__(self):
        return f"{self.kind} {self.from_state}->{self.to_state}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise PermissionError("Audit events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("Audit events are append-only.")


class AuditInstallation(models.Model):
    """This installation's identity and the moment its audit trail became keyed: one row, written
    by migration 0045 and never changed (a trigger refuses it). Exported heads carry both, signed,
    so verification holds the database to them: an event hashed without a key after
    ``keyed_since`` was written by someone without the key (ledger.core.audit_verify)."""

    installation = models.UUIDField(unique=True)
    keyed_since = models.DateTimeField()
    # The highest id of an event without a MAC under a key (hashed before keys, or before chaining)
    # when the record was written; 0 for none. Every event above it must be keyed, whatever its
    # time says (an owner sets created_at as it likes, not the ids already handed out).
    unkeyed_until = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="audit_installation_one_row")]

    def __str__(self):
        return f"installation {self.installation}, keyed since {self.keyed_since:%Y-%m-%d %H:%M:%S}"


class AuditArchive(models.Model):
    """A month of the audit trail taken out to a file (``manage.py archive_audit``): the partition's
    rows went to ``file_name`` and the partition was dropped, in the transaction that wrote this
    row. ``chains`` says where each chain's stretch in it began and ended, so that verification
    takes up the live chains from there (ledger.core.audit_verify). ``mac`` signs the record under
    the audit key (ledger.core.audit_archive): a record made up by someone without the key, to hide
    a month dropped by hand, does not verify. Written once, by the tables' owner; a trigger refuses
    any change."""

    partition = models.CharField(max_length=63, unique=True)
    starts = models.DateTimeField(null=True, blank=True)  # None: from the beginning (the history)
    ends = models.DateTimeField()
    events = models.BigIntegerField()
    # {"<workspace id, "" for the global chain; then ":<lane>" for a lane past 0>": {"first_prev":
    #  hash the stretch follows, "last_id": id, "last_hash": hash, "events": n}}
    chains = models.JSONField()
    file_name = models.CharField(max_length=255)
    file_sha256 = models.CharField(max_length=64)
    key_id = models.CharField(max_length=16)
    mac = models.CharField(max_length=64)
    archived_at = models.DateTimeField()

    class Meta:
        ordering = ["ends"]

    def __str__(self):
        return f"{self.partition}: {self.events} events to {self.file_name}"
