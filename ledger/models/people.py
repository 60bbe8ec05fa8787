"""People and the ledger: API tokens (a person's or a machine's), the people behind an
operation (four eyes), and approval decisions."""

import hashlib
import secrets

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Value

from ledger.models.checks import choices_check


class Scope(models.TextChoices):
    """What a token may be used for (docs/api-for-flows.md). A person's token does it as that person,
    within their role; a machine's never approves, whatever its scopes."""

    EVENTS = "events", "submit events"
    CLAIMS = "claims", "claim, heartbeat and report the operations its caller performs"
    READ = "read", "read operations and pauses"
    OPERATE = "operate", "replay, resolve, cancel, take, decide conflicts, pause and resume"
    APPROVE = "approve", "approve or reject (a person's token only)"


# What a token may do unless told otherwise: what every token did before scopes existed, so a
# token issued as before, or one of the release before (the migration gives them these), works as
# it did. Acting on operations is asked for by name.
DEFAULT_SCOPES = [Scope.EVENTS.value, Scope.CLAIMS.value, Scope.READ.value]


def default_scopes() -> list[str]:
    return list(DEFAULT_SCOPES)


class ApiToken(models.Model):
    """A workspace's bearer token. Only its SHA-256 is stored; the token is shown once.

    A token with a ``user`` is that person's: what it submits is theirs, so they cannot approve
    it. A token without one is a machine's. Its ``scopes`` say which routes it may call.
    """

    PREFIX = "oc_"
    Scope = Scope

    workspace = models.ForeignKey("ledger.Workspace", on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, blank=True)
    # PROTECT: deleting the person would silently turn their token into a machine's (revoke it first).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="api_tokens"
    )
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="The token's first characters, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # A default in the database too: a process of the release before inserts tokens without it.
    scopes = ArrayField(
        models.CharField(max_length=10, choices=Scope.choices),
        default=default_scopes,
        db_default=Value(DEFAULT_SCOPES, ArrayField(models.CharField(max_length=10))),
        help_text="What the token may be used for.",
    )

    class Meta:
        verbose_name = "API token"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scopes__contained_by=[value for value, _ in Scope.choices]),
                name="apitoken_scopes_valid",
            ),
        ]

    def __str__(self):
        return f"{self.workspace.slug} {self.hint}…"

    @staticmethod
    def hash(token: str) -> str:
        # Tokens carry 256 random bits, so a plain SHA-256 is enough (no password stretching).
        return hashlib.sha256(token.encode("utf-8")).hexdigest()

    @classmethod
    def generate(cls) -> str:
        return cls.PREFIX + secrets.token_urlsafe(32)


class ContributionKind(models.TextChoices):
    SUBMITTED = "submitted"  # sent the payload: as the operation's first delivery, or a conflict later applied
    CHANGED = "changed"  # applied a conflict's payload
    REPLAYED = "replayed"  # ran it again


class Contribution(models.Model):
    """A person behind an operation's payload or run. None of them may approve it (four eyes)."""

    Kind = ContributionKind

    operation = models.ForeignKey("ledger.Operation", on_delete=models.PROTECT, related_name="contributions")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="contributions")
    kind = models.CharField(max_length=10, choices=ContributionKind.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["operation", "created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=choices_check("kind", ContributionKind.choices), name="contribution_kind_valid"
            ),
        ]

    def __str__(self):
        return f"{self.user} {self.kind} {self.operation_id}"


class ApprovalDecision(models.TextChoices):
    APPROVED = "approved"
    REJECTED = "rejected"


class Approval(models.Model):
    """A person's decision on a consequential operation, for the exact payload they saw.

    An operation may collect several over its life (a replay asks for a new sign-off); the worker
    performs it only under the latest, if that approved the payload as it is now.
    """

    Decision = ApprovalDecision

    operation = models.ForeignKey("ledger.Operation", on_delete=models.PROTECT, related_name="approvals")
    fingerprint = models.CharField(max_length=64, help_text="The payload fingerprint that was decided on.")
    decision = models.CharField(max_length=10, choices=ApprovalDecision.choices)
    approver = models.CharField(max_length=150)
    note = models.CharField(max_length=500, blank=True)
    decided_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-decided_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=choices_check("decision", ApprovalDecision.choices), name="approval_decision_valid"
            ),
        ]

    def __str__(self):
        return f"{self.decision} by {self.approver}"


class Role(models.TextChoices):
    """What a person may do in one workspace (``ledger.core.roles`` says which capabilities each grants)."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    APPROVER = "approver"
    ADMIN = "admin"


class Membership(models.Model):
    """A person's role in one workspace: they see and act on that workspace only (a superuser: all)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    workspace = models.ForeignKey("ledger.Workspace", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workspace", "user"]
        constraints = [
            models.UniqueConstraint(fields=["user", "workspace"], name="membership_one_per_workspace"),
            models.CheckConstraint(condition=choices_check("role", Role.choices), name="membership_role_valid"),
        ]

    def __str__(self):
        return f"{self.user} {self.role} of {self.workspace}"
