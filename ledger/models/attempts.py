"""Tries at an operation's effect, and the configurations they ran under. Rows change only through
the engine (``ledger.engine``) and the callers' reports (``ledger.callers``)."""

from django.db import models
from django.db.models import JSONField, Q, Value

from ledger.models.checks import choices_check


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
            # running are nearly all rows, and are read newest first along the primary key). The
            # outcome leads: one outcome's attempts are one range, and an outcome no attempt has
            # an empty one, where an index on the id alone read every attempt that was not ok.
            models.Index(fields=["outcome", "id"], name="attempt_outcome_idx", condition=~Q(outcome__in=["", "ok"])),
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
