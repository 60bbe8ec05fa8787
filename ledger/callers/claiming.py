"""Claims in one database call: a claim (or a batch of them, ``POST /api/v1/claims/batch``) is one
statement and one commit. ``ledger_claim`` (``sql/claim.sql``) reserves each event with
``ledger_reserve_one`` (or finds the recorded operation a claim by key names), holds its row and
decides the claim as ``ledger.callers.claims.standing`` does, claiming it when it may be; Python
seals the audit events it returns and inserts them with the commit, then builds the answers.

The statements are written by hand: nothing is compiled by the ORM on this path. An API token taken
from the process's cache is checked by the call itself (its first claim), as intake's reservation
checks it, or alone before anything the call does not decide is written or answered. What the call
does not decide goes the way of ``ledger.callers.claims`` (Python, a transaction of its own):
- a claim intake would refuse or reserve otherwise (invalid, too old, a version under
  ``latest_wins``, a lease or action the claim refuses, a claim by key of an action nobody claims),
  and every claim in a workspace with subscriptions (its arrivals are announced in their
  transaction, ``ledger.core.announcements``): ``claims.claim``, as before;
- an operation met overdue (its lease expired, its deadline passed): moved as the sweep would,
  then claimed again (``claims.take``), after this call's commit.

A batch is one transaction: its items are decided in their order, so a key twice in it is claimed
by its first item and the later ones are answered as a second concurrent claimer would be.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from django.db import connection
from django.utils import timezone

from ledger.actions import ActionDefinition
from ledger.callers import claims
from ledger.callers.tokens import token_for
from ledger.core import accounts, announcements, audit_chain, configuration, contention, tallies
from ledger.core.rows import dumps, from_json, model_row
from ledger.core.transitions import log_transition
from ledger.intake import reservation, submit
from ledger.intake.decoding import storable_text_problem
from ledger.models import Attempt, Control, Operation, Workspace
from ledger.states import TERMINAL_STATES, State

# Every item of a request decided in its order, in one statement (``ledger_claim_request``,
# sql/claim_request.sql): each item (its own part: key, lease, its event) given with what its
# action's claims share (the second parameter names them by action: the configuration's rows and the
# reservation's templates, sent once a request), then the claims counted on this process's rows (the
# third parameter, ``tallies.shard``), once per answer's labels (one row update each, not one per
# claim). A function, so that PostgreSQL plans the statement once per session, not at every request.
CALL = "SELECT ledger_claim_request(%s::jsonb, %s::jsonb, %s)"
# Tries of a batch's transaction (a single claim has contention.TRIES): batches that share keys in
# other orders each wait for the other's inserts, and every deadlock between them is decided by
# aborting one, which runs again against whatever a third batch holds by then. With 3 batches of
# 8 keys on a loaded machine, 4 tries ran out (tests/ledger/callers/test_claim_lanes.py).
BATCH_TRIES = 8
# The operations a request's claims by key name: their actions say how each is claimed.
ACTIONS_OF_KEYS = "SELECT key, action FROM ledger_operation WHERE workspace_id = %s AND key = ANY(%s)"


@dataclass
class _Item:
    """One claim the call decides: its own part of the request (the call adds what its action's
    claims share, ``_shared``), and what Python needs to answer it."""

    request: dict
    action: ActionDefinition
    lease: timedelta
    event: reservation.Event | None = None  # an envelope's


def claim(
    *, workspace: Workspace, raw: Any, submitted_by: str, person=None, token: dict | None = None
) -> claims.Answer:
    """``claims.claim`` in one database call (the same answers)."""
    [answer] = claim_each(workspace=workspace, raws=[raw], submitted_by=submitted_by, person=person, token=token)
    return answer


def claim_each(
    *,
    workspace: Workspace,
    raws: list,
    submitted_by: str,
    person=None,
    max_claim_bytes: int | None = None,
    token: dict | None = None,
) -> list[claims.Answer]:
    """Each of ``raws`` claimed (an envelope with ``lease_seconds``, or ``key`` and
    ``lease_seconds``) and answered as ``claims.claim`` answers it alone, in one call and one commit
    for all of them but those the module docstring names. ``max_claim_bytes`` holds each (as UTF-8
    JSON) to the limit of a single claim: a larger one is refused on its own (413).

    ``token``: the ``recheck`` of an API token taken from the process's cache
    (``accounts.cached_token``), checked before anything is written or answered: by the call
    itself when it decides every claim, else alone first (``accounts.check_token``);
    ``accounts.TokenChanged`` when it changed, nothing written."""
    sender = {"submitted_by": submitted_by, "person": person}
    now = timezone.now()
    answers: dict[int, claims.Answer] = {}
    items: dict[int, _Item] = {}
    too_large: list[int] = []
    later: list[int] = []  # answered by claims.claim, after the call
    listened = announcements.may_announce(workspace.pk)
    recorded = _actions_of_keys(workspace, raws) if not listened else {}
    shared: dict[str, dict] = {}  # what the request's claims of one action share (``_shared``)
    for index, raw in enumerate(raws):
        if max_claim_bytes is not None and submit.json_size(raw) > max_claim_bytes:
            too_large.append(index)
            continue
        item = None if listened else _item(workspace, raw, recorded, shared, now=now, actor=submitted_by, person=person)
        if isinstance(item, claims.Answer):
            answers[index] = item
        elif item is None:
            later.append(index)
        else:
            items[index] = item
    if too_large or later or not items:
        # Something is written or answered outside the call: the token is checked before it.
        accounts.check_token(token)
        token = None
    for index in too_large:
        answers[index] = _too_large(workspace, raws[index], max_claim_bytes or 0, **sender)
    if items:
        _config_once(list(items.values()), shared)
        tries = BATCH_TRIES if len(items) > 1 else contention.TRIES
        results = contention.retried(
            _call, workspace, list(items.values()), shared, token, doing="claiming", tries=tries
        )
        for (index, item), result in zip(items.items(), results, strict=True):
            answers[index] = _answer(workspace, item, result, now=now, actor=submitted_by)
    for index in later:
        answers[index] = claims.claim(workspace=workspace, raw=raws[index], **sender)
    return [answers[index] for index in range(len(raws))]


def _config_once(items: list[_Item], shared: dict[str, dict]) -> None:
    """A configuration stored by the first claim that names it: the later ones of the request, in
    its transaction, find it (its content, the action's whole schema, is sent once)."""
    seen = set()
    for item in items:
        config = shared[item.action.name]["config"]
        if config["digest"] not in seen:
            item.request["config"] = config
        seen.add(config["digest"])


def _too_large(workspace: Workspace, raw: Any, limit: int, **sender) -> claims.Answer:
    refused = submit.record_blocked_delivery(
        workspace=workspace,
        source=claims.SOURCE,
        reason="too_large",
        http_status=413,
        raw=raw,
        extra={"limit_bytes": limit},
        errors=[{"field": "body", "message": f"the claim is larger than the limit of {limit} bytes"}],
        **sender,
    )
    return claims.Answer(claims.BLOCKED, intake=refused)


def _actions_of_keys(workspace: Workspace, raws: list) -> dict[str, str]:
    """The action of each operation the claims by key name (one statement for all of them)."""
    keys = [raw["key"] for raw in raws if _by_key(raw) and isinstance(raw["key"], str) and raw["key"]]
    keys = [key for key in keys if not storable_text_problem(key)]
    if not keys:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(ACTIONS_OF_KEYS, [workspace.pk, keys])
        return dict(cursor.fetchall())


def _by_key(raw: Any) -> bool:
    return isinstance(raw, dict) and "key" in raw and "action" not in raw


def _item(
    workspace: Workspace, raw: Any, recorded: dict[str, str], shared: dict, *, now: datetime, actor: str, person
) -> "_Item | claims.Answer | None":
    """The call's request for ``raw``; an answer when it needs no call (a key of no operation);
    None when ``claims.claim`` answers it (a refusal is recorded there)."""
    if _by_key(raw):
        if set(raw) - {"key", "lease_seconds"} or claims.lease_problem(raw.get("lease_seconds")):
            return None
        if not isinstance(raw["key"], str) or not raw["key"] or storable_text_problem(raw["key"]):
            return None
        if raw["key"] not in recorded:
            return claims.no_such_operation()
        action = claims.registry.get(recorded[raw["key"]])
        if action is None or not action.performed_by_caller:
            return None
        lease = _lease(raw.get("lease_seconds"), action)
        _shared(workspace, action, shared, now=now, actor=actor)
        return _Item(_request(raw["key"], action, lease), action, lease)
    if not isinstance(raw, dict) or not isinstance(raw.get("action"), str):
        return None
    raw = dict(raw)
    lease_seconds = raw.pop("lease_seconds", None)
    action = claims.registry.get(raw["action"])  # as claims.claim looks it up
    if action is None or not action.performed_by_caller or claims.lease_problem(lease_seconds):
        return None
    event = submit.prepared_event(workspace, raw)
    if event is None or event.action.name != action.name:
        return None
    lease = _lease(lease_seconds, action)
    common = _shared(workspace, action, shared, now=now, actor=actor)
    request = _request(event.key, action, lease)
    # The reservation as intake makes it (ledger.intake.reservation), inside the claim's call: its
    # rows' templates shared by the action's claims, the event its own.
    if common["reserve"] is None:
        common["reserve"] = reservation.shared_request(
            workspace, event, source=claims.SOURCE, submitted_by=actor, person=person, now=now
        )
    request["reserve"] = {"events": reservation.events_json([event], now)}
    return _Item(request, action, lease, event)


def _lease(seconds: int | None, action: ActionDefinition) -> timedelta:
    return timedelta(seconds=seconds) if seconds is not None else action.claim_lease


def _request(key: str, action: ActionDefinition, lease: timedelta) -> dict:
    """A claim's own part of what ``ledger_claim`` is given (``CALL`` adds its action's ``_shared``)."""
    return {"action": action.name, "key": key, "lease_seconds": lease.total_seconds(), "config": None}


def _shared(
    workspace: Workspace, action: ActionDefinition, shared: dict[str, dict], *, now: datetime, actor: str
) -> dict:
    """What every claim of ``action`` in the request has in common (its configuration, the rows'
    templates, what it decides by), built by the first and kept in ``shared``: a batch of 100 builds
    and sends it once, not 100 times. The first claim of the action carries the configuration's row
    (``config``), which it stores; the later ones, in its transaction, find it."""
    common = shared.get(action.name)
    if common is None:
        version = configuration.version_for(workspace.pk, action)
        rows = _rows(workspace.pk, actor)
        common = shared[action.name] = {
            "workspace_id": workspace.pk,
            "action": action.name,
            "reserve": None,  # the reservation's templates, from the first claim of an event (``_item``)
            "now": now,
            "actor": actor,
            "whole_deadline": action.deadline.total_seconds(),
            "consequential": action.consequential,
            "terminal_states": _TERMINAL,
            "config": model_row(version) | {"digest": version.digest, "created_at": now},
            "attempt": rows["attempt"] | {"started_at": now, "config_version_id": version.digest},
            "audit": rows["audit"] | {"created_at": now},
            "tally_labels": _tally_labels(action.name),
        }
    return common


@lru_cache(maxsize=1024)
def _rows(workspace_id: int, actor: str) -> dict[str, dict]:
    """The rows a claim opens, as Django would write them (every column), for one caller: each
    claim then sets its times and configuration, ledger_claim what only the database knows. Built
    once per caller and process (as ``reservation``'s rows are)."""
    return {
        "attempt": model_row(Attempt(worker=actor)),
        "audit": audit_chain.event_row(workspace_id, actor),
    }


_TERMINAL = sorted(TERMINAL_STATES)


@lru_cache(maxsize=1024)
def _tally_labels(action: str) -> dict[str, str]:
    """The labels of the claims counter for each answer the call may count (a decided state's
    answer under the state's name)."""
    statuses = [
        claims.DONE,
        claims.IN_PROGRESS,
        claims.RETRY_LATER,
        claims.HELD,
        claims.WAITING,
        claims.AWAITING_APPROVAL,
        claims.CLAIMED,
    ]
    labels = {status: tallies.labels_of(action=action, answer=status) for status in statuses}
    for state, (status, _) in claims.DECIDED.items():
        labels[state.value] = tallies.labels_of(action=action, answer=status)
    return labels


def _call(workspace: Workspace, items: list[_Item], shared: dict[str, dict], token: dict | None) -> list[dict]:
    """One transaction: the call (the first claim checking ``token``, when there is one), then its
    audit events sealed and inserted with the COMMIT (``audit_chain.in_one_transaction``)."""
    requests = [item.request for item in items]
    commons = {name: common | {"config": None} for name, common in shared.items()}
    if len(requests) > 1:
        # Each item locks every lane of the workspace, in order, where it would take its own: the
        # lanes of the later items are not known yet, and taken in the items' order two batches
        # could deadlock over them (ledger_audit_head).
        commons = {name: _every_lane(common) for name, common in commons.items()}
    if token is not None:
        requests = [requests[0] | {"token": token}, *requests[1:]]
    with accounts.token_checked():
        return audit_chain.in_one_transaction(
            CALL, [dumps(requests), dumps(commons), tallies.shard()], lambda results: _events(results) or None
        )


def _every_lane(common: dict) -> dict:
    reserve = common["reserve"]
    return common | {"every_lane": True, "reserve": reserve and reserve | {"every_lane": True}}


def _events(results: list[dict]) -> str:
    """The events of every item, each lane's sealed after its head: the items that went to a lane
    read the same head under the lock the first took (none is inserted before this), so each lane's
    are one run, in id order."""
    audits = [result["audit"] for result in results if result.get("audit")]
    if not audits:
        return ""
    heads = {lane: head for item_heads, _ in audits for lane, head in item_heads.items()}
    rows = sorted((row for _, rows in audits for row in rows), key=lambda row: row["id"])
    return audit_chain.sealed(heads, rows)


def _answer(workspace: Workspace, item: _Item, result: dict, *, now: datetime, actor: str) -> claims.Answer:
    """What the call decided, answered as ``claims.standing`` words it."""
    status = result["answer"]
    if status == claims.NOT_FOUND:  # purged between the lookup and the call
        return claims.no_such_operation()
    if status == claims.BLOCKED:  # a payload conflict: answered as intake answers it
        [reserved] = reservation.reserved_from(workspace, result["reserved"])
        assert item.event is not None
        return claims.Answer(claims.BLOCKED, reserved.operation, intake=submit.answered(item.event, reserved))
    if item.event is not None:
        reservation.wake(result["reserved"])  # the operation's instance is built once, below
    operation = from_json(Operation, result["operation"], workspace=workspace)
    if status == "overdue":
        return claims.take(operation, item.action, lease=item.lease, actor=actor)
    if status == claims.CLAIMED:
        attempt = from_json(Attempt, result["attempt"], operation=operation)
        log_transition(
            operation, from_state=result["from_state"], to_state=State.PROCESSING, kind="claimed", attempt=attempt
        )
        message = claims.ACT_NOW
        return claims.Answer(claims.CLAIMED, operation, message, token=token_for(operation), attempt=attempt)
    if status == claims.HELD:
        switch = from_json(Control, result["switch"])
        switch.workspace = workspace if switch.workspace_id is not None else None
        return claims.held(operation, switch)
    return claims.decided(operation, status, now)
