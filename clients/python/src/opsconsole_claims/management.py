"""The routes besides the claim itself (docs/api-for-flows.md): submit events and batches, list due
work, read operations, decide them, decide conflicts, pause and resume. One method per route, each
returning the answer's body (a dict, as the OpenAPI document describes it); a refusal (4xx) raises
`Refused`, with the body's ``status``, ``reason``, ``detail`` and ``errors``; the service's own
failures are retried, then raised as `ServiceUnavailable` (``_transport``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from opsconsole_claims.errors import Refused
from opsconsole_claims.routes import ROUTES

if TYPE_CHECKING:
    from opsconsole_claims._transport import Transport

Body = dict[str, Any]
PauseScope = Literal["workspace", "action", "destination"]


class Management:
    """The management routes of `Ledger` (which this is a part of)."""

    _transport: Transport

    def _call(
        self,
        route: str,
        *,
        body: Body | None = None,
        query: dict[str, Any] | None = None,
        **segments: str | int,
    ) -> Body:
        """``route``'s answer body when it is a success; else `Refused`. Fields that are None are
        not sent: the server's default applies."""
        found = ROUTES[route]
        params = {name: value for name, value in (query or {}).items() if value is not None}
        response, answer = self._transport.send(
            found.method,
            found.path(**segments),
            body=None if body is None else {name: value for name, value in body.items() if value is not None},
            params=params or None,
        )
        if not response.is_success:
            raise Refused(response.status_code, answer)
        return answer

    # Submitting work (the `events` scope)

    def submit_event(
        self,
        action: str,
        data: dict[str, Any],
        *,
        delivery_id: str | None = None,
        correlation_id: str | None = None,
        occurred_at: datetime | str | None = None,
    ) -> Body:
        """``POST /events``: ``status`` "accepted" (201) or "duplicate" (200), with the operation's
        ``key``. A blocked event (409 ``payload_conflict`` with its ``conflict_id``, 422 ...) raises
        `Refused`, whose ``body`` holds the whole answer."""
        return self._call("submit_event", body=envelope(action, data, delivery_id, correlation_id, occurred_at))

    def submit_batch(self, events: list[dict[str, Any]]) -> Body:
        """``POST /events/batch``: each event (a dict as `submit_event` sends it: ``action``,
        ``data``, ...) answered on its own in ``results``, with the ``http_status`` it would have had
        alone; a batch too large raises `Refused` (413)."""
        return self._call("submit_batch", body={"events": events})

    # Due work of actions you perform (the `claims` scope)

    def claim_batch(self, claims: list[dict[str, Any]]) -> Body:
        """``POST /claims/batch``: each claim (an envelope with ``lease_seconds``, or ``key`` and
        ``lease_seconds``) answered on its own in ``results``, with the ``http_status`` it would have
        had alone; only a ``claimed`` result (with its own ``token``) says act. A batch too large
        raises `Refused` (413)."""
        return self._call("claim_batch", body={"claims": claims})

    def due(self, *, action: str | None = None, limit: int | None = None, cursor: str | None = None) -> Body:
        """``GET /claims/due``: ``operations`` that may be claimed now, oldest first (claim each with
        `Ledger.claim_by_key`), and ``next_cursor`` (None on the last page)."""
        return self._call("due", query={"action": action, "limit": limit, "cursor": cursor})

    # Reading (the `read` scope)

    def operations(
        self,
        *,
        state: str | None = None,
        action: str | None = None,
        destination: str | None = None,
        age: Literal["1h", "24h", "7d"] | None = None,
        q: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Body:
        """``GET /operations``: one page, ``operations`` and ``next_cursor`` (pass it as ``cursor``
        for the next page; None on the last). ``state``: "attention" (the server's default), "held",
        "any" or one state; the other filters as the console's queue has them."""
        filters = {"state": state, "action": action, "destination": destination, "age": age, "q": q}
        return self._call("operations", query=filters | {"limit": limit, "cursor": cursor})

    def every_operation(
        self,
        *,
        state: str | None = None,
        action: str | None = None,
        destination: str | None = None,
        age: Literal["1h", "24h", "7d"] | None = None,
        q: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Body]:
        """Each operation the filters of `operations` choose, reading page after page (``limit``
        a page)."""
        cursor = None
        while True:
            page = self.operations(
                state=state, action=action, destination=destination, age=age, q=q, limit=limit, cursor=cursor
            )
            yield from page["operations"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def operation(self, key: str) -> Body:
        """``GET /operations/{key}``: the operation, its ``fingerprint`` and its history (``tries``,
        ``deliveries``, ``conflicts``, ``decisions``, ``audit``)."""
        return self._call("operation", key=key)

    # Deciding: each answers ``status`` (what it did), ``message`` and the ``operation`` as it is now

    def approve(self, key: str, *, fingerprint: str, reason: str | None = None) -> Body:
        """A person's token with `approve`. ``fingerprint``: the operation's as you read it; the
        payload changed since is refused 409 ``stale_fingerprint``."""
        return self._call("approve", body={"fingerprint": fingerprint, "reason": reason}, key=key)

    def reject(self, key: str, *, fingerprint: str, reason: str) -> Body:
        """Final: the operation never runs. A person's token with `approve`; a reason is required."""
        return self._call("reject", body={"fingerprint": fingerprint, "reason": reason}, key=key)

    def replay(self, key: str, *, reason: str, accept_config_change: bool = False, force_unknown: bool = False) -> Body:
        """Run an operation that needs review again, under its own key: ``status`` "replayed", or
        "succeeded" when the destination's lookup found the record (nothing sent)."""
        body = {"reason": reason, "accept_config_change": accept_config_change, "force_unknown": force_unknown}
        return self._call("replay", body=body, key=key)

    def resolve(self, key: str, *, external_id: str, note: str) -> Body:
        """You found the record at the destination: the operation is succeeded with its id."""
        return self._call("resolve", body={"external_id": external_id, "note": note}, key=key)

    def cancel(self, key: str, *, reason: str) -> Body:
        """Give up on an operation that has not run to an end (the destination is asked first)."""
        return self._call("cancel", body={"reason": reason}, key=key)

    def take(self, key: str, *, take_over: bool = False) -> Body:
        """Mark it yours (a person's token): ``status`` "taken", or "unchanged" if it was."""
        return self._call("take", body={"take_over": take_over}, key=key)

    def release(self, key: str) -> Body:
        """Give it back: ``status`` "released", or "unchanged" if you had not taken it."""
        return self._call("release", key=key)

    def apply_conflict(self, conflict_id: int, *, reason: str) -> Body:
        """The conflict's incoming payload becomes the operation's, while it has not run."""
        return self._call("apply_conflict", body={"reason": reason}, conflict_id=conflict_id)

    def dismiss_conflict(self, conflict_id: int, *, reason: str) -> Body:
        """The recorded payload stands."""
        return self._call("dismiss_conflict", body={"reason": reason}, conflict_id=conflict_id)

    # Pauses (`read` to list, `operate` to pause and resume)

    def pauses(self) -> Body:
        """``GET /pauses``: the pulled switches holding this workspace's work, in ``pauses``."""
        return self._call("pauses")

    def pause(
        self, *, scope: PauseScope, reason: str, action: str | None = None, destination: str | None = None
    ) -> Body:
        """Pull a switch: the workspace, one action in it (``action``), or every action calling a
        destination (``destination``; one pause per action). Answers the switches in ``pauses``."""
        body = {"scope": scope, "action": action, "destination": destination, "reason": reason}
        return self._call("pause", body=body)

    def resume(self, pause_id: int) -> Body:
        """Release a switch by its ``id``: ``status`` "resumed"."""
        return self._call("resume", pause_id=pause_id)


def envelope(
    action: str,
    data: dict[str, Any],
    delivery_id: str | None = None,
    correlation_id: str | None = None,
    occurred_at: datetime | str | None = None,
    **more: Any,
) -> Body:
    """An event's (or a claim's) body, without the fields left None."""
    if isinstance(occurred_at, datetime):
        occurred_at = occurred_at.isoformat()
    fields = {
        "action": action,
        "data": data,
        "delivery_id": delivery_id,
        "correlation_id": correlation_id,
        "occurred_at": occurred_at,
        **more,
    }
    return {name: value for name, value in fields.items() if value is not None}
