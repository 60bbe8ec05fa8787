"""The internal destinations: the rows the internal actions write (``prepare-brief``'s review drafts,
``update-status``'s latest status per request), each traceable to its operation."""

from django.db import models


class ReviewDraft(models.Model):
    """The internal destination of ``prepare-brief``: one per operation, by a one-to-one."""

    # The draft is the destination's record: it outlives its operation's key (retention deletes the
    # tombstone and leaves the draft, no longer linked).
    operation = models.OneToOneField(
        "Operation", on_delete=models.SET_NULL, null=True, blank=True, related_name="review_draft"
    )
    workspace = models.ForeignKey("Workspace", on_delete=models.PROTECT, related_name="review_drafts")
    title = models.CharField(max_length=500)
    owner = models.CharField(max_length=100)
    state = models.CharField(max_length=20, default="awaiting_review")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"draft-{self.pk}: {self.title}"


class RequestStatus(models.Model):
    """The internal destination of ``update-status``: each request's latest status. Its action runs
    under latest_wins (ledger.intake.ordering), and the row also keeps the version it holds, so an older
    version that ran late can never overwrite a newer one."""

    workspace = models.ForeignKey("Workspace", on_delete=models.PROTECT, related_name="request_statuses")
    request_id = models.CharField(max_length=200)
    status = models.CharField(max_length=50)
    version = models.PositiveIntegerField()
    operation = models.ForeignKey("Operation", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "request statuses"
        constraints = [models.UniqueConstraint(fields=["workspace", "request_id"], name="request_status_unique")]

    def __str__(self):
        return f"{self.request_id}: {self.status} (v{self.version})"
