"""The ledger's tables, by concept. Rows change only through the services."""

from ledger.models.attempts import Attempt, AttemptOutcome, ConfigVersion
from ledger.models.audit import AuditArchive, AuditEvent, AuditEventQuerySet, AuditInstallation
from ledger.models.bulk import BulkAction, BulkItem, BulkKind, BulkOutcome, BulkStatus
from ledger.models.core import Operation, Workspace
from ledger.models.deliveries import (
    REFUSED_OUTCOMES,
    Conflict,
    ConflictStatus,
    Delivery,
    DeliveryOutcome,
    DeliverySource,
)
from ledger.models.figures import BacklogSample, FlowSample
from ledger.models.integrations import Destination, DestinationAuth, HookRefusal, HttpAction, Source, SourceScheme
from ledger.models.internal_destinations import RequestStatus, ReviewDraft
from ledger.models.machinery import (
    Control,
    DestinationHealth,
    DestinationSlot,
    Heartbeat,
    PauseInterval,
    Tally,
    Wakeup,
)
from ledger.models.people import (
    ApiToken,
    Approval,
    ApprovalDecision,
    Contribution,
    ContributionKind,
    Membership,
    Role,
    Scope,
)
from ledger.models.policy import OnConflict, Ordering, Policy
from ledger.models.subscriptions import Subscription

__all__ = [
    "ApiToken",
    "Approval",
    "ApprovalDecision",
    "Attempt",
    "AttemptOutcome",
    "AuditArchive",
    "AuditEvent",
    "AuditInstallation",
    "AuditEventQuerySet",
    "BacklogSample",
    "FlowSample",
    "BulkAction",
    "BulkItem",
    "BulkKind",
    "BulkOutcome",
    "BulkStatus",
    "ConfigVersion",
    "Destination",
    "DestinationAuth",
    "HttpAction",
    "Conflict",
    "ConflictStatus",
    "Contribution",
    "ContributionKind",
    "Control",
    "Delivery",
    "DeliveryOutcome",
    "DeliverySource",
    "DestinationHealth",
    "DestinationSlot",
    "Heartbeat",
    "HookRefusal",
    "PauseInterval",
    "Membership",
    "Operation",
    "OnConflict",
    "Ordering",
    "Policy",
    "REFUSED_OUTCOMES",
    "RequestStatus",
    "ReviewDraft",
    "Role",
    "Scope",
    "Source",
    "SourceScheme",
    "Subscription",
    "Tally",
    "Wakeup",
    "Workspace",
]
