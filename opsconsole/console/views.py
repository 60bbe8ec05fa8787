"""Console views: thin. Each finds what it shows or acts on within the person's workspaces (404
outside them), checks the person's role there (403), calls one ledger service and reports the
outcome through the messages framework (POST/redirect/GET); none of them writes a ledger row itself.
"""

import json
import secrets
from datetime import timedelta
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from ledger.actions import UnknownAction, get_action, registry
from ledger.callers import tokens
from ledger.core import audit_partitions, privacy, roles
from ledger.core.configuration import changes_since_last_run
from ledger.core.held_time import with_held_time
from ledger.core.roles import APPROVE, PAUSE, REVIEW, VIEW
from ledger.core.selectors import (
    AT_RISK_SHARE,
    due_caller_operations,
    held_operations,
    holding_switch,
    oldest_caller_due_seconds,
    oldest_due_seconds,
    oldest_held_seconds,
    scope_filter,
    service_level_standing,
    standing,
)
from ledger.integrations import destination_status
from ledger.models import Conflict, Control, Heartbeat, Operation
from ledger.outcomes import AmbiguousError, OutcomeError, PermanentError, TransientError
from ledger.people import assignment, holds
from ledger.people.bulk_actions import MAX_OPERATIONS
from ledger.people.may import May, conflict_refusal, own_work, what_may
from ledger.reads import keyset, replica
from ledger.states import CLAIMABLE_STATES, TERMINAL_STATES, State
from ledger.timed import duration_text, promised_text
from opsconsole.console import explain, labels, neighbours, tables
from opsconsole.console.filters import DUE, audit_search
from opsconsole.console.forms import (
    PauseForm,
)
from reconciliation.reconcile import lookups_give_up_at

QUEUE_PAGE_SIZE = 50


QUEUE_COUNT_CAP = 10_000


AUDIT_PAGE_SIZE = 100


def _member(view):
    """403 for a person who belongs to no workspace (a superuser belongs everywhere)."""

    @wraps(view)
    def check(request, *args, **kwargs):
        if roles.workspace_ids(request.user) == set():
            raise PermissionDenied(
                f"{request.user.get_username()} is a member of no workspace yet, so the console has nothing to show."
            )
        return view(request, *args, **kwargs)

    return check


def console_page(view):
    """Login (redirect to the login page), then membership of some workspace (403)."""
    return login_required(_member(view))


def console_action(view):
    """A POST-only action: login, then 405 for other methods, then membership (403). The view
    itself checks the role in the workspace it acts on (``_operation``, ``conflict_for``)."""
    return login_required(require_POST(_member(view)))


def operation_for(request, pk, capability=VIEW) -> Operation:
    """The operation, if it is in one of the person's workspaces (else 404) and they hold
    ``capability`` there (else 403)."""
    # With the time a pause held it (ledger.core.held_time): its deadline as its next claim will see it.
    operations = with_held_time(Operation.objects.select_related("workspace", "assigned_to"))
    operation = get_object_or_404(roles.visible(operations, request.user), pk=pk)
    if not roles.can(request.user, capability, operation.workspace_id):
        raise PermissionDenied(roles.refusal(request.user, capability, operation.workspace))
    return operation


def conflict_for(request, pk) -> Conflict:
    conflicts = Conflict.objects.select_related("operation", "operation__workspace")
    conflict = get_object_or_404(roles.visible(conflicts, request.user, via="operation__workspace"), pk=pk)
    # 403 for who may not decide it at all; applying a side they may not see is refused by the service.
    if conflict_refusal(request.user, conflict, applying=False):
        raise PermissionDenied
    return conflict


def person_of(request) -> str:
    return request.user.get_username()


@console_page
def queue(request):
    switches = list(Control.objects.filter(paused=True).select_related("workspace").order_by("id"))
    listing = tables.queue_listing(request, switches)
    filterset, sort = listing.filterset, listing.sort
    page = keyset.paginate(
        filterset.qs.select_related("assigned_to").only(*tables.QUEUE_COLUMNS),
        request.GET,
        field=sort.field,
        size=QUEUE_PAGE_SIZE,
        ascending=sort.ascending,
    )
    # Counted up to a bound: past it the exact number tells a person nothing more, and counting it
    # would read every row that needs attention on every view. Every state's count in one query.
    counts = tables.state_counts(listing, cap=QUEUE_COUNT_CAP)
    state = filterset.chosen_state
    count = counts[state]
    tables.summarise(page.object_list)
    can_bulk = roles.workspace_ids(request.user, REVIEW) != set()
    if listing.showing_held:
        for op in page.object_list:
            op.held_by = holding_switch(op, switches)
    return render(
        request,
        "console/queue.html",
        {
            "nav": "queue",
            "showing_held": listing.showing_held,
            "showing_due": state == DUE,
            "filter": filterset,
            "page": page,
            "count": min(count, QUEUE_COUNT_CAP),
            "count_capped": count > QUEUE_COUNT_CAP,
            "states": tables.state_tabs(counts, current=state, cap=QUEUE_COUNT_CAP),
            "sorting": tables.sort_headers(sort),
            "open_conflicts": roles.visible(
                Conflict.objects.filter(status=Conflict.Status.OPEN), request.user, via="operation__workspace"
            ).count(),
            "health": _health(switches, roles.workspace_ids(request.user)),
            # Ticking rows to replay or cancel them at once (opsconsole.console.bulk), for who may review.
            "can_bulk": can_bulk,
            "can_take": can_bulk or roles.workspace_ids(request.user, APPROVE) != set(),
            "nothing_to_take": assignment.nothing_to_take(page.object_list),
            "bulk_token": secrets.token_urlsafe(24),
            "matching": _matching(request, filterset, count, shown=len(page)) if can_bulk else None,
            "matching_limit": MAX_OPERATIONS,
            "list_query": tables.list_query(request.GET, "queue"),
            "replica_lag": replica.lag_notice(listing.database),
        },
    )


def _matching(request, filterset, count: int, *, shown: int) -> dict | None:
    return tables.matching_selection(request, filterset.qs, count, shown=shown, limit=MAX_OPERATIONS)


def _decisions_shown(op, *, reveal: bool) -> dict:
    """The approvals and the audit trail, the payloads' fingerprints they name masked where the
    person sees the values masked (``privacy.fingerprint_shown``: the hash would give them away)."""
    approvals = list(op.approvals.order_by("decided_at", "id"))
    for approval in approvals:
        approval.shown_fingerprint = privacy.fingerprint_shown(approval.fingerprint, op.action, reveal=reveal)
    events = list(op.audit_events.order_by("created_at", "id"))
    for event in events:
        event.shown_message = privacy.fingerprints_masked(event.message, op.action, reveal=reveal)
    return {"approvals": approvals, "audit_events": events}


def _health(switches: list[Control], workspace_ids: set[int] | None) -> dict:
    """The queue's health line, of the person's workspaces (None: a superuser's, all)."""
    now = timezone.now()
    beat = Heartbeat.objects.filter(name="sweep").values_list("beat_at", flat=True).first()
    oldest = oldest_due_seconds(now, switches, workspace_ids=workspace_ids)
    held = oldest_held_seconds(now, switches, workspace_ids=workspace_ids)
    caller = oldest_caller_due_seconds(now, switches, workspace_ids=workspace_ids)
    seconds = {
        "oldest_caller_due_seconds": int(caller) if caller is not None else None,
        "sweep_seconds": int((now - beat).total_seconds()) if beat else None,
        "oldest_due_seconds": int(oldest) if oldest is not None else None,
        "oldest_held_seconds": int(held) if held is not None else None,
    }
    # Each also in words, as people read a wait (42 s, 7 min, 3 h 5 min): "oldest_due_text", ...
    return seconds | {
        name.replace("_seconds", "_text"): duration_text(timedelta(seconds=value)) if value is not None else None
        for name, value in seconds.items()
    }


@console_page
def operation(request, pk):
    op = operation_for(request, pk)
    definition = definition_of(op.action)
    user = request.user
    reveal = privacy.may_view_sensitive(user, op.workspace_id)
    payload = privacy.masked(op.payload, op.action, reveal=reveal)
    contributions = list(op.contributions.select_related("user").order_by("created_at", "id"))
    may = what_may(user, op, contributions=contributions)
    mine = own_work(user, contributions)
    conflicts = [
        {
            "conflict": conflict,
            "differences": labels.difference_rows(
                privacy.masked_differences(conflict.differences, op.action, reveal=reveal),
                definition,
                recorded=payload,
                incoming=privacy.masked(conflict.incoming_payload, op.action, reveal=reveal),
            ),
            # Who may dismiss it, and apply it: not who may not see the sensitive fields it differs in.
            "can_dismiss": not conflict_refusal(user, conflict, applying=False),
            "apply_refusal": conflict_refusal(user, conflict, applying=True),
        }
        for conflict in op.conflicts.order_by("-created_at", "-id")
    ]
    attempts = list(op.attempt_rows.order_by("number", "id"))
    switches = list(Control.objects.filter(paused=True).select_related("workspace"))
    by_caller = bool(definition and definition.performed_by_caller)
    # Caller work between claims: it waits for its caller, never for opsconsole's workers.
    waits_for_caller = by_caller and op.state in CLAIMABLE_STATES
    for attempt in attempts:
        # The outcome's badge already says transient, permanent or ambiguous; a library's own error
        # (ConnectTimeout...) says more and stays.
        attempt.error_kind = "" if attempt.error_type in OUTCOME_ERROR_NAMES else attempt.error_type
    return render(
        request,
        "console/operation.html",
        {
            "nav": "queue",
            "operation": op,
            "payload": labels.payload_rows(payload, definition),
            "result": json.dumps(privacy.masked(op.result, op.action, reveal=reveal), indent=2, sort_keys=True)
            if op.result
            else "",
            "masking": payload != op.payload,  # some value is masked: say who may see it
            "attempts": attempts,
            "attempt_limit": definition.max_attempts if definition else None,
            "deliveries": op.deliveries.order_by("received_at", "id"),
            "conflicts": conflicts,
            **_decisions_shown(op, reveal=reveal),
            "contributions": contributions,
            "own_work": mine,
            "can_review": may.review,
            # Held by a conflict: it has not run, and runs once its conflicts are decided (not replayed).
            "held_by_conflict": holds.is_held(op),
            "can_replay": may.replay,
            # The replay form names the risk (and offers to accept it) when a try may have reached the destination.
            "replay_may_duplicate": op.state == State.NEEDS_REVIEW and may.landed,
            "cancel_asks_first": may.cancel and may.landed,
            # ... and what changed in the action's configuration since it last ran, to be confirmed.
            "config_changes": changes_since_last_run(op, definition)
            if may.review and definition and op.state == State.NEEDS_REVIEW
            else [],
            # Mark succeeded: only where a try may have landed (never after definite refusals alone).
            "can_resolve": may.mark_succeeded,
            "can_look_up": may.look_up,
            "can_cancel": may.cancel,
            # Four eyes: whoever submitted, changed or replayed it may neither approve nor reject it.
            "can_decide": may.decide,
            # The note fields on the page, beside which a refusal is said (forms.report_refusal).
            "beside_fields": _beside_fields(may, conflicts),
            # A lookup's failure is the last error of an unknown operation: the try's own error is
            # shown first, the lookup's below it.
            "last_try": _last_try_error(op, attempts),
            "final": op.state in TERMINAL_STATES,
            "who_can_act": explain.who_can_act(
                user, op, may, own_work=mine, contributor_ids={c.user_id for c in contributions}
            ),
            "give_up_at": lookups_give_up_at(op) if op.state == State.UNKNOWN else None,
            "waiting": destination_status.waiting_for(op),
            "by_caller": by_caller,
            "waits_for_caller": waits_for_caller,
            "caller_due": waits_for_caller and due_caller_operations(switches=switches).filter(pk=op.pk).exists(),
            # Enough of the claim's token to match it with the caller's own logs; never all of it.
            "token_hint": tokens.token_for(op)[-6:] if by_caller and op.state == State.PROCESSING else "",
            "standing": _standing(op, definition),
            "held_by": holding_switch(op, switches),
            # Take: while work is left (a finished operation only with a conflict to decide).
            "can_take": assignment.may_take(
                user, op, open_conflict=any(item["conflict"].status == Conflict.Status.OPEN for item in conflicts)
            ),
            # Previous and next in the list it was opened from (opsconsole.console.neighbours).
            "neighbours": neighbours.around(request, op),
        },
    )


OUTCOME_ERROR_NAMES = {kind.__qualname__ for kind in (OutcomeError, TransientError, PermanentError, AmbiguousError)}


def _beside_fields(may: May, conflicts: list) -> list[str]:
    fields = ["operation-reason"] if may.replay or may.cancel else []
    fields += (["resolve-reason"] if may.mark_succeeded else []) + (["approval-note"] if may.decide else [])
    fields += [
        f"conflict-{item['conflict'].pk}-reason"
        for item in conflicts
        if item["conflict"].status == "open" and item["can_dismiss"]
    ]
    return fields


def _last_try_error(op: Operation, attempts: list):
    """The last failed try, when the operation's last error is a lookup's (reconciliation's)."""
    if op.last_error_category != "unknown":
        return None
    failed = [attempt for attempt in attempts if attempt.error_message]
    return failed[-1] if failed else None


def definition_of(action: str):
    try:
        return get_action(action)
    except UnknownAction:
        return None


@console_page
def controls(request):
    # Switches beyond one workspace (global, an action everywhere) hold everyone's work: shown to all.
    switches = Control.objects.filter(paused=True).select_related("workspace").order_by("-changed_at", "-id")
    ids = roles.workspace_ids(request.user)
    if ids is not None:
        switches = switches.filter(Q(workspace__isnull=True) | Q(workspace_id__in=ids))
    switches = list(switches)
    # What each switch holds, of what this person may see: one query, a filtered count per switch.
    holds = (
        roles.visible(held_operations(switches), request.user).aggregate(
            **{
                f"switch_{control.pk}": Count("pk", filter=scope_filter(control.workspace_id, control.action))
                for control in switches
            }
        )
        if switches
        else {}
    )
    rows = [
        {
            "control": control,
            "can_resume": roles.can(request.user, PAUSE, control.workspace_id),
            "holds": holds.get(f"switch_{control.pk}", 0),
        }
        for control in switches
    ]
    form = PauseForm(user=request.user)
    return render(
        request,
        "console/controls.html",
        {
            "nav": "controls",
            "switches": rows,
            "form": form,
            "can_pause": form.fields["workspace"].queryset.exists() or request.user.is_superuser,
        },
    )


@console_page
def service_levels(request):
    levels, listed = service_level_standing(roles.visible(Operation.objects.all(), request.user))
    for operation in listed:
        operation.age_shown = duration_text(operation.age)
        operation.level_shown = promised_text(operation.service_level)
    levels = [{"level": level, "shown": promised_text(level.level)} for level in levels]
    return render(
        request,
        "console/service_levels.html",
        {
            "nav": "service_levels",
            "levels": levels,
            # Named, so that an action missing from the table is not taken for one that is on time.
            "without_level": sorted(name for name, action in registry.items() if action.service_level is None),
            "operations": listed,
            "at_risk_percent": int(AT_RISK_SHARE * 100),
        },
    )


def _standing(op: Operation, definition) -> str:
    """ "late" or "at risk" against the action's service level, for unfinished work; else ""."""
    level = definition.service_level if definition else None
    if level is None or op.state in TERMINAL_STATES:
        return ""
    age = timezone.now() - op.created_at
    said = {
        "late": f"Late: {duration_text(age)} since it arrived, past its service level of {promised_text(level)}.",
        "at_risk": f"At risk: {duration_text(age)} since it arrived, of a service level of {promised_text(level)}.",
    }
    return said.get(standing(age, level), "")


@console_page
def audit(request):
    filterset = audit_search(request.GET, request.user)
    events = filterset.qs.select_related("operation", "workspace")
    page = keyset.paginate(events, request.GET, field="created_at", size=AUDIT_PAGE_SIZE)
    for event in page:
        event.shown_message = privacy.audit_message_shown(event, request.user)
    return render(
        request,
        "console/audit.html",
        {
            "nav": "audit",
            "filter": filterset,
            "page": page,
            "replica_lag": replica.lag_notice(events.db),
            "archived_until": audit_partitions.archived_until(),
        },
    )
