"""Subscriptions: where a workspace is told, as signed Standard Webhooks, that its operations changed
(``ledger.core.announcements`` turns each change into a notification operation; docs/integrations.md,
Notifications). Their rows change only through ``ledger.integrations.subscriptions``."""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

# What a subscription may ask to be told, in the order the docs list them, and what each tells (the
# admin's form says it beside the name; docs/integrations.md, Notifications).
EVENTS = {
    "operation.due": "an operation its caller performs may be claimed now",
    "operation.needs_review": "an operation needs review (a permanent failure, the attempt limit, a deadline...)",
    "operation.unknown": "a try may have acted and nobody knows yet",
    "operation.awaiting_approval": "an operation waits for an approver",
    "operation.succeeded": "an operation succeeded",
    "operation.conflict": "a delivery reused a key with other business fields (a conflict for review)",
}


class Subscription(models.Model):
    """One receiver of a workspace's notifications: its URL, the events it wants, and the environment
    variable holding the ``whsec_`` secret the notifications are signed with (never stored here)."""

    workspace = models.ForeignKey("Workspace", on_delete=models.PROTECT, related_name="subscriptions")
    # Unique across workspaces, as a source's slug is: the integrations file's key for it.
    name = models.SlugField(max_length=50, unique=True, help_text="The integrations file's key for it.")
    url = models.URLField(max_length=500, help_text="Where notifications are POSTed (http or https).")
    events = ArrayField(models.CharField(max_length=40), help_text="The events it is told: " + ", ".join(EVENTS))
    secret_env = models.CharField(max_length=100, help_text="Environment variable holding the whsec_ signing secret.")
    active = models.BooleanField(default=True, help_text="Inactive: no notification is created for it.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(events__contained_by=list(EVENTS)) & ~Q(events=[]), name="subscription_events_valid"
            ),
        ]

    def __str__(self):
        return self.name
