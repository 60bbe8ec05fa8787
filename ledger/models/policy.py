"""Per-action policy, overridable per workspace: how long payloads and keys are kept, and how
versions of one request are ordered. Read through ``ledger.core.policies``, which fills in what a row
leaves blank from the row for every workspace, then from the action's definition."""

from datetime import timedelta

from django.db import models
from django.db.models import Q

from ledger.models.checks import choices_check


class Ordering(models.TextChoices):
    # Each version is an action of its own (prepare-brief: the seed's v4 is new work).
    INDEPENDENT = "independent"
    # A newer version supersedes older ones that have not run; an older one arriving late is stale.
    LATEST_WINS = "latest_wins"
    # Version n+1 waits until version n is finished (a gap waits at most the gap wait).
    IN_ORDER = "in_order"


class OnConflict(models.TextChoices):
    """What a delivery that reuses a key with a changed payload does to an operation that has not run
    yet (it is always recorded as an open conflict; docs/design.md rule 3)."""

    # The recorded payload runs; a person may still apply the incoming one until the worker claims it.
    FIRST_WINS = "first_wins"
    # The operation stops for review (needs_review, category ``conflict``) until a person applies or
    # dismisses the conflict (ledger.people.holds).
    HOLD = "hold"


class Policy(models.Model):
    """One action's policy in one workspace, or (no workspace) in every workspace. A blank field
    inherits: from the every-workspace row, then from the action's definition."""

    workspace = models.ForeignKey(
        "ledger.Workspace", on_delete=models.CASCADE, null=True, blank=True, related_name="policies"
    )
    action = models.CharField(max_length=100)
    payload_retention = models.DurationField(
        null=True, blank=True, help_text="How long a finished operation keeps its payload; then it is redacted."
    )
    key_retention = models.DurationField(
        null=True,
        blank=True,
        help_text="How long a finished operation's key is kept (a redelivery within it is a duplicate); "
        "then it is deleted, and an arrival older than this is refused as stale.",
    )
    ordering = models.CharField(max_length=20, choices=Ordering.choices, blank=True)
    gap_wait = models.DurationField(
        null=True, blank=True, help_text="in_order: how long a version waits for a missing predecessor."
    )
    changed_by = models.CharField(max_length=150, blank=True)
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "policies"
        ordering = ["action", "workspace__slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["action"], condition=Q(workspace__isnull=True), name="policy_unique_every_workspace"
            ),
            models.UniqueConstraint(
                fields=["workspace", "action"], condition=Q(workspace__isnull=False), name="policy_unique_workspace"
            ),
            models.CheckConstraint(
                condition=Q(ordering="") | choices_check("ordering", Ordering.choices), name="policy_ordering_valid"
            ),
            models.CheckConstraint(
                condition=(Q(payload_retention__isnull=True) | Q(payload_retention__gt=timedelta(0)))
                & (Q(key_retention__isnull=True) | Q(key_retention__gt=timedelta(0)))
                & (Q(gap_wait__isnull=True) | Q(gap_wait__gt=timedelta(0))),
                name="policy_windows_positive",
            ),
        ]

    def __str__(self):
        return f"{self.action} in {self.workspace.slug if self.workspace is not None else 'every workspace'}"
