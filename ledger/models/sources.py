"""Sources of signed webhooks: their senders (Stripe, GitHub, any Standard Webhooks sender) whose
deliveries become events (``ledger.integrations.sources``). Configuration, not code: a source names its
signature scheme, where its secrets are, and how a body maps to our envelope."""

from django.core.validators import MinValueValidator, validate_slug
from django.db import models

from ledger.models.checks import choices_check


class SourceScheme(models.TextChoices):
    STANDARD_WEBHOOKS = "standard_webhooks", "Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature)"
    GITHUB = "github", "GitHub (X-Hub-Signature-256, X-GitHub-Delivery)"
    STRIPE = "stripe", "Stripe (Stripe-Signature t=…,v1=…)"


class Source(models.Model):
    """One sender of signed webhooks, posting to ``/api/v1/hooks/<slug>``."""

    Scheme = SourceScheme

    workspace = models.ForeignKey("Workspace", on_delete=models.PROTECT, related_name="sources")
    slug = models.SlugField(max_length=50, unique=True, validators=[validate_slug])
    scheme = models.CharField(max_length=20, choices=SourceScheme.choices)
    # The secrets are never stored here: each names the environment variable that holds one. Two at
    # once while a secret is rotated (the sender may sign with either until it switches).
    secret_env = models.CharField(max_length=100, help_text="Environment variable holding the signing secret.")
    previous_secret_env = models.CharField(
        max_length=100, blank=True, help_text="While rotating: the variable holding the secret being retired."
    )
    tolerance_seconds = models.PositiveIntegerField(
        default=300,
        validators=[MinValueValidator(1)],
        help_text="How far a signed timestamp may be from now (schemes that sign one).",
    )
    # [{"event": "invoice.paid", "when": "<JMESPath, optional>", "action": "<action>",
    #   "data": {"<field>": "<JMESPath on the body>"}, "correlation_id": "<JMESPath, optional>"}]:
    # the first rule whose event (and condition) matches maps the delivery; none: ignored.
    rules = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=choices_check("scheme", SourceScheme.choices), name="source_scheme_valid"),
        ]

    def __str__(self):
        return self.slug


class HookRefusal(models.Model):
    """Deliveries to a source refused before their signature was known good (a bad or missing
    signature, a body unread, an endpoint challenge), counted per client address, reason and hour:
    anyone can send them, so none is a row of its own (``ledger.intake.refusals``).

    Each further one bumps ``count`` and ``last_seen``, columns no index holds, on a table kept half
    empty (fillfactor 50, migration 0047): a HOT update, whose old version the next visit to the page
    prunes without a vacuum."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="refusals", db_index=False)
    # The client's address as counted (``refusals.counted_address``: an IPv6 one as its /48, no port;
    # "" unknown, "other addresses" past the hour's limit at the source).
    address = models.CharField(max_length=64)
    reason = models.CharField(max_length=40)
    hour = models.DateTimeField(help_text="The start of the hour these arrived in.")
    count = models.PositiveBigIntegerField(default=1)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "address", "reason", "hour"], name="hook_refusal_unique_hour"),
        ]
        # The deliveries page reads the recent hours; retention deletes the old ones. Each count
        # reads its source's hour (the addresses counted in it: ``refusals.count_arrival``).
        indexes = [
            models.Index(fields=["hour"], name="hook_refusal_hour_idx"),
            models.Index(fields=["source", "hour"], name="hook_refusal_source_hour_idx"),
        ]

    def __str__(self):
        return f"{self.reason} x{self.count} from {self.address}"
