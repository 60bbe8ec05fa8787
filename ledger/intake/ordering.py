"""Versions of one request, under the action's ordering policy (``ledger.core.policies``):

- ``independent``: each version is an action of its own (prepare-brief: the seed's v4 is new work);
- ``latest_wins``: a newer version supersedes the older ones that have not run (pending, awaiting
  approval, or retrying after a failed try): they become ``superseded``. An older version arriving
  after a newer one is recorded and answered ``stale``. Versions of one request are reserved one at
  a time, under a lock of their series, so that two arriving together cannot both win;
- ``in_order``: version n+1 waits until version n is finished (a terminal state). Versions count
  from 1. A version whose predecessor has not arrived within the gap wait goes to needs_review,
  naming the missing version; replaying it lets it run without waiting.

A request's series is its key without the version; it, the version and the policy are stored on
the operation when it is reserved, so a later change of policy applies to versions reserved after it.
"""

from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from ledger.core import contention, policies
from ledger.core.selectors import in_a_series
from ledger.core.transitions import transition_many, transition_operation
from ledger.intake import reservation
from ledger.models import Delivery, Operation, Ordering
from ledger.states import State

# The first key of PostgreSQL's two-key advisory locks held by a series' reservations ("SERI").
_LOCK_NAMESPACE = 0x53455249
# What a newer version supersedes: versions that have not acted (a retrying one's tries failed).
UNRUN_STATES = (State.PENDING, State.PENDING_APPROVAL, State.RETRYING)
GAP = "gap"  # the error category of a version whose predecessor never arrived


def mark(workspace, event: reservation.Event, ordering: str) -> None:
    """Give ``event`` its series and version when its action's ``ordering`` orders versions."""
    action = event.action
    if ordering == Ordering.INDEPENDENT or "version" not in action.identity_fields:
        return
    # The key without its version component (components are percent-encoded: ":" only separates
    # them, and a sensitive identity field is already hashed in it).
    parts = event.key.split(":")
    del parts[1 + action.identity_fields.index("version")]
    event.series = ":".join(parts)
    event.version = event.data["version"]
    event.ordered = ordering


def reserve_latest(
    workspace, event: reservation.Event, *, source: str, submitted_by: str, person
) -> reservation.Reserved:
    """Reserve a ``latest_wins`` version, in a transaction of its own that holds its series (run
    again should the database abort it for a deadlock: ``ledger.core.contention``).

    Its own key again: a duplicate or a conflict, as always. A newer version already there: the
    event is recorded as a stale delivery and answered with that newer operation. Otherwise the
    older versions that have not run are superseded, and it is reserved.
    """
    return contention.retried(
        _reserve_latest,
        workspace,
        event,
        source=source,
        submitted_by=submitted_by,
        person=person,
        doing="reserving a latest_wins version",
    )


def _reserve_latest(workspace, event, *, source, submitted_by, person) -> reservation.Reserved:
    with transaction.atomic():
        _lock(workspace, event.series)
        versions = list(
            in_a_series()
            .filter(workspace=workspace, series=event.series)
            .order_by("-version")
            .values_list("key", "version")
        )
        new = event.key not in {key for key, _ in versions}
        if new and versions and versions[0][1] > event.version:
            newer = Operation.objects.select_related("workspace").get(workspace=workspace, key=versions[0][0])
            reservation.stale_delivery(
                workspace,
                event,
                [stale_error(event.version, newer.version)],
                source=source,
                submitted_by=submitted_by,
                person=person,
            ).save()
            return reservation.Reserved(Delivery.Outcome.STALE, newer)
        # Lock order (docs/architecture.md): row locks before the audit chain's. Reserving takes the
        # chain, and superseding the older versions' rows, which a worker's claim may hold while it
        # waits for that chain: so they are superseded first, and reserving then only inserts new
        # rows. Under the series lock a key no operation has is reserved (accepted) by this event.
        if new and not Operation.objects.filter(workspace=workspace, key=event.key).exists():
            _supersede_older(workspace.pk, event, actor=submitted_by or source)
        [reserved] = reservation.reserve(
            workspace, [event], refused=[], source=source, submitted_by=submitted_by, person=person
        )
    return reserved


def stale_error(version: int | None, newer: int | None) -> dict:
    return {
        "field": "data.version",
        "message": f"version {version} is older than version {newer} of this request, "
        "which supersedes it (the action's ordering is latest_wins)",
    }


def _lock(workspace, series: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s::integer, hashtext(%s))", [_LOCK_NAMESPACE, f"{workspace.pk}:{series}"]
        )


def _supersede_older(workspace_id: int, newest: reservation.Event, *, actor: str) -> None:
    # Their rows locked first, in id order; then moved and audited at once (the chain last).
    older = list(
        in_a_series()
        .filter(workspace_id=workspace_id, series=newest.series, version__lt=newest.version, state__in=UNRUN_STATES)
        .select_for_update(no_key=True)
        .order_by("id")
    )
    transition_many(
        older,
        to_state=State.SUPERSEDED,
        actor=actor,
        kind="superseded",
        message=f"superseded by version {newest.version} ({newest.key}) before it ran",
        same={"next_attempt_at": None},
    )


def send_gaps_to_review(*, now=None, batch: int = 500) -> int:
    """``in_order`` versions whose predecessor has not arrived within the gap wait go to
    needs_review, naming the missing version. Returns how many went."""
    now = now or timezone.now()
    arrived_predecessor = in_a_series().filter(
        workspace_id=OuterRef("workspace_id"), series=OuterRef("series"), version=OuterRef("version") - 1
    )
    gapped = (
        in_a_series()
        .filter(ordered=Ordering.IN_ORDER, version__gt=1, state=State.PENDING)
        .exclude(Exists(arrived_predecessor))
        .order_by("created_at")
    )
    sent = 0
    for operation in gapped[:batch]:
        wait = policies.policy_for(operation.workspace_id, operation.action).gap_wait
        if operation.created_at > now - wait:
            continue
        missing = operation.version - 1
        sent += transition_operation(
            operation,
            to_state=State.NEEDS_REVIEW,
            actor="sweep",
            kind="version_missing",
            error_category=GAP,
            message=f"version {missing} of this request did not arrive within {policies.format_duration(wait)}",
            last_error_category=GAP,
            last_error_message=f"version {missing} is missing (in_order)",
            next_attempt_at=None,
        )
    return sent
