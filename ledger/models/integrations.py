"""Configured integrations, the systems a workspace connects without code: the Sources of signed
webhooks in (Stripe, GitHub, any Standard Webhooks sender; ``ledger.integrations.sources`` makes
their deliveries events, ``ledger.intake.refusals`` counts the arrivals a hook refuses), the
Destinations out (a vendor's API: where, how we authenticate, how it deduplicates, how fast it may
be called) and the HTTP actions that call them (``ledger.integrations.configured`` makes each row an
action definition that runs through the same engine as the coded ones). Their rows change only
through ``ledger.integrations`` (the integrations file and the admin), which checks and audits them."""

from django.core.validators import MinValueValidator, validate_slug
from django.db import models

from ledger.models.checks import choices_check
from ledger.models.policy import OnConflict, Ordering


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


class DestinationAuth(models.TextChoices):
    NONE = "none", "None"
    BEARER = "bearer", "Bearer token (Authorization: Bearer <secret>)"
    BASIC = "basic", "Basic (the secret is user:password)"
    HEADER = "header", "A header of its own (auth_header: <secret>)"


class Destination(models.Model):
    """A vendor's HTTP API that configured actions call."""

    Auth = DestinationAuth

    slug = models.SlugField(max_length=50, unique=True, validators=[validate_slug])
    base_url = models.URLField(max_length=500)
    auth = models.CharField(max_length=10, choices=DestinationAuth.choices, default=DestinationAuth.NONE)
    auth_header = models.CharField(max_length=100, blank=True, help_text="The header's name, for auth=header.")
    # The secret is never stored here: the destination names the environment variable that holds it.
    secret_env = models.CharField(
        max_length=100, blank=True, help_text="Environment variable holding the credential (not the credential)."
    )
    connect_timeout_seconds = models.FloatField(default=3.0, validators=[MinValueValidator(0.1)])
    timeout_seconds = models.FloatField(
        default=10.0, validators=[MinValueValidator(0.1)], help_text="How long to wait for an answer."
    )
    idempotency_header = models.CharField(
        max_length=100, blank=True, help_text="The header that carries our key, if the vendor honours one."
    )
    idempotency_key_retention_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How long the vendor keeps a key (Stripe: 86400); empty: as long as we do.",
    )
    rate_limit_per_second = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.01)])
    max_concurrency = models.PositiveIntegerField(default=4, validators=[MinValueValidator(1)])
    breaker_threshold = models.PositiveIntegerField(
        null=True, blank=True, help_text="Transient failures in a row that pause calls; empty: no breaker."
    )
    breaker_cooldown_seconds = models.PositiveIntegerField(default=30, validators=[MinValueValidator(1)])
    error_code = models.CharField(
        max_length=200,
        blank=True,
        help_text="JMESPath to the vendor's error code in a refusal's JSON body (e.g. error.type); "
        "empty: the usual places (ledger.actions.answers.DEFAULT_CODE).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=choices_check("auth", DestinationAuth.choices), name="destination_auth_valid"
            ),
        ]

    def __str__(self):
        return self.slug


class PerformedBy(models.TextChoices):
    OPSCONSOLE = "opsconsole", "opsconsole's workers (its request)"
    CALLER = "caller", "the caller, which claims it (docs/claims.md)"


class HttpAction(models.Model):
    """An action type defined by configuration: its data, its identity, its policies, and the request
    that performs it at its destination, or, performed by its caller, only how to ask the destination
    about it (docs/integrations.md has the format)."""

    PerformedBy = PerformedBy

    name = models.SlugField(max_length=50, unique=True, validators=[validate_slug])
    destination = models.ForeignKey(Destination, on_delete=models.PROTECT, related_name="actions")
    # JSON Schema (draft 2020-12) of the event's data.
    schema = models.JSONField(default=dict)
    identity_fields = models.JSONField(default=list)
    # {field: normaliser name} (ledger.integrations.http_action.NORMALISERS), one per identity field.
    normalisers = models.JSONField(default=dict, blank=True)
    fingerprint_fields = models.JSONField(default=list)
    consequential = models.BooleanField(default=False)
    sensitive_fields = models.JSONField(default=list, blank=True)
    # {amount field: currency field}
    money_fields = models.JSONField(default=dict, blank=True)
    # The operation's line in the console's lists: "{field}" names a data field that is not
    # sensitive (ledger.actions.summaries); blank: its identity fields.
    summary = models.CharField(max_length=200, blank=True)
    max_attempts = models.PositiveIntegerField(default=5, validators=[MinValueValidator(1)])
    backoff_base_seconds = models.FloatField(default=2.0, validators=[MinValueValidator(0)])
    backoff_cap_seconds = models.FloatField(default=300.0, validators=[MinValueValidator(0)])
    deadline_seconds = models.PositiveIntegerField(default=86400, validators=[MinValueValidator(1)])
    settle_after_seconds = models.PositiveIntegerField(default=30)
    ordering = models.CharField(max_length=20, choices=Ordering.choices, default=Ordering.INDEPENDENT)
    # A conflicting redelivery before the operation runs: first_wins, or hold it for review.
    on_conflict = models.CharField(max_length=20, choices=OnConflict.choices, default=OnConflict.FIRST_WINS)
    payload_retention_days = models.PositiveIntegerField(default=30, validators=[MinValueValidator(1)])
    key_retention_days = models.PositiveIntegerField(default=90, validators=[MinValueValidator(1)])
    # Who performs it: our workers send ``request``; a caller claims it over HTTP, acts itself and
    # reports (ledger.callers), and ``request`` stays empty: we only look its records up.
    performed_by = models.CharField(max_length=20, choices=PerformedBy.choices, default=PerformedBy.OPSCONSOLE)
    claim_lease_seconds = models.PositiveIntegerField(
        default=60, help_text="Performed by the caller: the lease a claim gets when the caller names none."
    )
    # From arrival to a final state (the console's Service levels); empty: no promise.
    service_level_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Empty: no promise."
    )
    # {method, path, headers, body, body_format: json|form}: strings hold {{ JMESPath }} over
    # {data: the operation's payload, key: its key}.
    request = models.JSONField(default=dict, blank=True)
    # {record_id: JMESPath on the answer, message: JMESPath for a refusal's text,
    #  outcomes: [{when: JMESPath on {status, body}, outcome: success|transient|permanent|ambiguous}]}
    response = models.JSONField(default=dict, blank=True)
    # {repeat: true (while the vendor keeps the key), path: "/tickets?source_key={{ key }}",
    #  found: JMESPath to the records (a list), record_id: JMESPath on one, absent_on_404: a 404 to
    #  the GET means no record}; {}: a person decides.
    lookup = models.JSONField(default=dict, blank=True)
    # {path (with {{ created_after }} and {{ created_before }}, ISO 8601, or their _epoch seconds),
    #  records, record_id, reference, created_at, fields: {data field: JMESPath on a record}, paging:
    #  page_param + page_size (+ page_size_param), or cursor_param + next_cursor}: the destination's
    #  records for the two-way reconciliation audit.
    listing = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "HTTP action"
        constraints = [
            models.CheckConstraint(
                condition=choices_check("ordering", Ordering.choices), name="http_action_ordering_valid"
            ),
            models.CheckConstraint(
                condition=choices_check("on_conflict", OnConflict.choices), name="http_action_on_conflict_valid"
            ),
            models.CheckConstraint(
                condition=choices_check("performed_by", PerformedBy.choices), name="http_action_performed_by_valid"
            ),
        ]

    def __str__(self):
        return self.name
