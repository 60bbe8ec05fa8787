"""The client: claim an operation, then act and report through the `Claim` it answers with; and the
management routes (``opsconsole_claims.management``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx

from opsconsole_claims._transport import Transport
from opsconsole_claims.claim import Claim
from opsconsole_claims.errors import ClaimError, Refused
from opsconsole_claims.management import Management, envelope
from opsconsole_claims.routes import ROUTES

# The answers that are a claim (act, or do not act and here is why); every other is a refusal.
DEFERRING_HTTP = (409, 423)


class Ledger(Management):
    """opsconsole's claims API at ``base_url``, with a workspace API token.

    ``timeout`` bounds each request (seconds); a connection error, a timeout or a 5xx answer is
    retried ``max_retries`` times with exponential backoff from ``backoff`` seconds (doubling, with
    jitter, each wait at most ``max_backoff``; Retry-After honoured up to that), then raised as
    `ServiceUnavailable`. ``heartbeat_every`` overrides the heartbeat's period (default: a third of
    the lease). ``transport`` is httpx's, for tests.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        heartbeat_every: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        self._transport = Transport(
            base_url,
            token,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            transport=transport,
        )
        self._heartbeat_every = heartbeat_every

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._transport.close()

    def claim(
        self,
        action: str,
        data: dict[str, Any],
        *,
        lease_seconds: int | None = None,
        delivery_id: str | None = None,
        correlation_id: str | None = None,
        occurred_at: datetime | str | None = None,
        permanent: tuple[type[BaseException], ...] = (),
        ambiguous: tuple[type[BaseException], ...] = (),
    ) -> Claim:
        """Claim the operation that ``action`` and ``data`` identify: a `Claim` whose ``should_act``
        says whether to act now (201). Done, in progress, retry later, held and the answers that wait
        for a person are claims too, with ``should_act`` False. Use it in a ``with`` block to keep the
        lease alive and have an exception reported (opsconsole_claims.claim says how). An exception of a type in
        ``permanent`` reports a permanent failure; one in ``ambiguous`` reports unknown.

        Raises `Refused` for a refused request (401, 409 blocked, 422 ...), `ServiceUnavailable`
        when the service did not answer after the retries."""
        body = envelope(action, data, delivery_id, correlation_id, occurred_at, lease_seconds=lease_seconds)
        return self._claim("claim", body, lease_seconds=lease_seconds, permanent=permanent, ambiguous=ambiguous)

    def claim_by_key(
        self,
        key: str,
        *,
        lease_seconds: int | None = None,
        permanent: tuple[type[BaseException], ...] = (),
        ambiguous: tuple[type[BaseException], ...] = (),
    ) -> Claim:
        """Claim an operation already recorded, by its key: due work a notification (``operation.due``)
        or `due` named. Answered as `claim` is; a 201's ``claim.data`` is the operation's data, in
        full, to send. A key no operation of the workspace has raises `Refused` (404), and so does one
        of an action the workers perform (422)."""
        body: dict[str, Any] = {"key": key, "lease_seconds": lease_seconds}
        body = {name: value for name, value in body.items() if value is not None}
        return self._claim("claim_by_key", body, lease_seconds=lease_seconds, permanent=permanent, ambiguous=ambiguous)

    def _claim(
        self,
        route: str,
        body: dict[str, Any],
        *,
        lease_seconds: int | None,
        permanent: tuple[type[BaseException], ...],
        ambiguous: tuple[type[BaseException], ...],
    ) -> Claim:
        response, answer = self._transport.post(ROUTES[route].path(), body)
        if not _is_claim(response, answer):
            raise Refused(response.status_code, answer)
        return Claim(
            self._transport,
            response,
            answer,
            lease_seconds=lease_seconds,
            heartbeat_every=self._heartbeat_every,
            permanent=permanent,
            ambiguous=ambiguous,
        )

    def performs(
        self,
        action: str,
        *,
        lease_seconds: int | None = None,
        permanent: tuple[type[BaseException], ...] = (),
        ambiguous: tuple[type[BaseException], ...] = (),
    ) -> Callable[[Callable[[dict[str, Any], Claim], Any]], Callable[..., Claim]]:
        """A decorator: ``f(data, claim)`` performs ``action`` and returns what to record, either
        ``(external_id, result)`` or the result alone (a dict, or None). The
        decorated function takes ``data`` and the claim's keywords (``delivery_id``, ``correlation_id``,
        ``occurred_at``, ``lease_seconds``), calls ``f`` only when the claim says act, reports
        succeeded with what ``f`` returned (an exception is reported as in a ``with`` block) and
        returns the `Claim`: status "done" with ``result`` and ``external_id`` when it is done, now
        or before; otherwise the deferring answer."""

        def decorate(perform: Callable[[dict[str, Any], Claim], Any]) -> Callable[..., Claim]:
            @functools.wraps(perform)
            def performed(data: dict[str, Any], **options: Any) -> Claim:
                options.setdefault("lease_seconds", lease_seconds)
                with self.claim(action, data, permanent=permanent, ambiguous=ambiguous, **options) as claim:
                    if claim.should_act:
                        returned = perform(data, claim)
                        claim.acted()  # it returned: whatever goes wrong from here, the effect is there
                        if not claim.reported:
                            external_id, result = _split(returned)
                            claim.succeeded(external_id=external_id, result=result)
                return claim

            return performed

        return decorate


def _is_claim(response: httpx.Response, answer: dict[str, Any]) -> bool:
    status = answer.get("status")
    if response.is_success:
        expected = {201: "claimed", 200: "done"}.get(response.status_code)
        if status != expected or (status == "claimed" and not answer.get("token")):
            raise ClaimError(f"an answer this client cannot read: HTTP {response.status_code} {answer!r}")
        return True
    # A deferring answer this client does not know yet is still one: never act on it.
    return response.status_code in DEFERRING_HTTP and bool(status) and status != "blocked"


def _split(returned: Any) -> tuple[str | None, Any]:
    if isinstance(returned, tuple):
        if len(returned) != 2:
            raise TypeError(f"a performing function returns (external_id, result) or a result, not {returned!r}")
        external_id, result = returned
        return (None if external_id is None else str(external_id)), result
    return None, returned
