"""One claim of an operation: what opsconsole answered, and the reports of the one who holds it.

Used as a context manager after a 201, a claim keeps its lease alive from a background thread, and
the block's end reports what the caller did not, never as a success:

- the caller reported (succeeded, failed, unknown): nothing more;
- an exception before ``claim.acted()``: failed, transient (permanent for a ``Permanent`` or a type
  in ``permanent=``), and the exception is raised;
- an exception after ``claim.acted()``, an ``Ambiguous`` or a type in ``ambiguous=``: unknown, raised;
- no exception and no report: unknown (the caller may have acted);
- the lease was lost (stale token), or a report could not reach the service: nothing (the server
  refuses the token; the lease's expiry makes the operation unknown).
"""

from __future__ import annotations

import logging
import sys
import threading
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import httpx

from opsconsole_claims.errors import Ambiguous, ClaimError, ClaimLost, Permanent, Refused, ServiceUnavailable
from opsconsole_claims.routes import ROUTES

if TYPE_CHECKING:
    from types import TracebackType

    from opsconsole_claims._transport import Transport

logger = logging.getLogger("opsconsole_claims")

ERROR_LIMIT = 500  # the server keeps at most this many characters of an error
# What the operation's state after a report means for the claim's status.
STATUS_AFTER_REPORT = {
    "succeeded": "done",
    "retrying": "retry_later",
    "needs_review": "needs_review",
    "unknown": "unknown",
}


def claim_path(key: str, what: str) -> str:
    """The path of the claim's ``what`` ("heartbeat", "outcome"), the key percent-encoded as one segment."""
    return ROUTES[what].path(key=key)


class Claim:
    """The answer to one claim, and, after a 201, the handle to report its outcome with.

    ``status`` is the operation as this client last knew it: the claim's answer ("claimed", "done",
    "in_progress", "retry_later", "held", "awaiting_approval", "needs_review", "unknown",
    "cancelled", ...), then, after a recorded report, the operation's new state ("done",
    "retry_later", "needs_review", "unknown"). ``should_act`` stays what the answer said: True only
    for a 201.
    """

    def __init__(
        self,
        transport: Transport,
        response: httpx.Response,
        answer: dict[str, Any],
        *,
        lease_seconds: int | None = None,
        heartbeat_every: float | None = None,
        permanent: tuple[type[BaseException], ...] = (),
        ambiguous: tuple[type[BaseException], ...] = (),
    ):
        self._transport = transport
        self.http_status = response.status_code
        self.answer = answer  # the whole body, for fields this class does not name
        self.status: str = answer["status"]
        self.should_act = response.status_code == 201
        self.key: str = answer.get("key", "")
        self.token: str | None = answer.get("token")
        self.attempt: int | None = answer.get("attempt")
        self.idempotency_key: str | None = answer.get("idempotency_key")
        self.lease_expires_at = _datetime(answer.get("lease_expires_at"))
        self.data: dict[str, Any] | None = answer.get("data")  # a claim by key's: what to send
        self.result: Any = answer.get("result")
        self.external_id: str | None = answer.get("external_id")
        self.operation: dict[str, Any] | None = answer.get("operation")
        self.message: str = answer.get("message", "")
        self.last_error: dict[str, Any] | None = answer.get("last_error")  # {"category", "message"}
        self.retry_after = _seconds(answer.get("retry_after"), response.headers.get("Retry-After"))
        self.reported: str | None = None  # the outcome recorded: "succeeded", "failed" or "unknown"
        self.recorded: dict[str, Any] | None = None  # the server's answer to that report
        self._requested_lease = lease_seconds
        self._lease = _lease_length(lease_seconds, self.lease_expires_at, response)
        self.heartbeat_every = heartbeat_every or self._lease / 3
        self._permanent = permanent
        self._ambiguous = ambiguous
        self._acted = False
        self._unreachable = False  # a report could not reach the service: the lease's expiry decides
        self._lost = threading.Event()
        self._lock = threading.Lock()
        self._heartbeat: Heartbeat | None = None

    def __repr__(self) -> str:
        return f"<Claim {self.key} {self.status}>"

    @property
    def lost(self) -> bool:
        """The server refused this claim's token as stale: nothing it reports is recorded."""
        return self._lost.is_set()

    @property
    def heartbeat_error(self) -> BaseException | None:
        """The last heartbeat's failure to reach the service, if its last try failed."""
        return self._heartbeat.error if self._heartbeat else None

    # The block

    def __enter__(self) -> Claim:
        if self.should_act:
            self._heartbeat = Heartbeat(self, every=self.heartbeat_every)
            self._heartbeat.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            if self.should_act and not (self.reported or self._unreachable or self.lost):
                self._report_end(exc)
        finally:
            self._stop_heartbeat()  # only now: the lease is kept while the report is retried

    def _report_end(self, exc: BaseException | None) -> None:
        if exc is None:
            logger.warning("claim of %s: the block ended without a report; reporting unknown", self.key)
            self.unknown(error="the claim's block ended without reporting an outcome")
            return
        try:
            self._report_exception(exc)
        except ClaimError as report_failure:
            # The caller's exception is the one to see; the report's failure rides along with it.
            _add_note(exc, f"opsconsole_claims: the outcome of {self.key} could not be reported: {report_failure}")
            logger.error("claim of %s: the outcome could not be reported: %s", self.key, report_failure)

    def _report_exception(self, exc: BaseException) -> None:
        error = _describe(exc)
        if self._acted or isinstance(exc, (Ambiguous, *self._ambiguous)):
            self.unknown(error=error)
        elif isinstance(exc, (Permanent, *self._permanent)):
            self.failed(category="permanent", error=error)
        else:
            self.failed(category="transient", error=error)

    # Reports

    def acted(self) -> None:
        """Say the effect may have happened: from now on an exception reports unknown, not failed."""
        self._acted = True

    def succeeded(self, *, external_id: str | None = None, result: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the success: every later claim of this key is answered done with ``result`` (a JSON
        object) and ``external_id`` (the destination's record id)."""
        self.acted()  # should this report be refused, the block's end reports unknown, not failed
        if result is not None and not isinstance(result, dict):
            raise TypeError(f"the result recorded is a dict (a JSON object), not {type(result).__name__}")
        body = _drop_none({"outcome": "succeeded", "external_id": external_id, "result": result})
        recorded = self._report(body)
        self.result, self.external_id = result, external_id
        return recorded

    def failed(
        self, *, category: str = "transient", error: str | None = None, retry_after: float | None = None
    ) -> dict[str, Any]:
        """Record a failure without effect: transient (the server schedules the next attempt, after
        ``retry_after`` seconds if given) or permanent (a person reviews it)."""
        if category not in ("transient", "permanent"):
            raise ValueError(f"category is 'transient' or 'permanent', not {category!r}")
        if retry_after is not None and category != "transient":
            raise ValueError("retry_after is for a transient failure only")
        body = {"outcome": "failed", "category": category, "error": _limit(error), "retry_after": retry_after}
        return self._report(_drop_none(body))

    def unknown(self, *, error: str | None = None) -> dict[str, Any]:
        """Record that the effect may or may not have happened: nobody acts again until a lookup or a
        person decides."""
        self.acted()
        return self._report(_drop_none({"outcome": "unknown", "error": _limit(error)}))

    def _report(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.should_act:
            raise ClaimError(f"nothing to report for {self.key}: the claim was answered {self.status}, not claimed")
        if self.reported:
            raise ClaimError(f"the outcome of {self.key} was already reported ({self.reported})")
        if self.lost:
            raise ClaimLost(self.key, "the heartbeat was refused")
        try:
            response, answer = self._transport.post(claim_path(self.key, "outcome"), {"token": self.token, **body})
        except ServiceUnavailable:
            self._unreachable = True
            raise
        if response.status_code == 409 and answer.get("status") == "stale_token":
            self._lose()
            raise ClaimLost(self.key, answer.get("message", ""))
        if response.status_code != 200 or answer.get("status") != "recorded":
            raise Refused(response.status_code, answer)
        with self._lock:
            self.reported, self.recorded = body["outcome"], answer
            self._lost.clear()  # a heartbeat that crossed the report may have been refused after it
        self.status = STATUS_AFTER_REPORT.get(answer.get("state", ""), self.status)
        self.operation = answer.get("operation", self.operation)
        self._stop_heartbeat()
        return answer

    # The lease

    def extend(self) -> None:
        """One heartbeat, without retries (the heartbeat thread tries again sooner if it fails)."""
        body = _drop_none({"token": self.token, "lease_seconds": self._requested_lease})
        response, answer = self._transport.post(claim_path(self.key, "heartbeat"), body, retries=0)
        status = answer.get("status")
        if response.status_code == 200 and status == "extended":
            self.lease_expires_at = _datetime(answer.get("lease_expires_at")) or self.lease_expires_at
        elif (response.status_code, status) in ((409, "stale_token"), (404, "not_found")):
            # opsconsole's own answers only: a proxy's 404 or 409 page loses nothing
            self._lose()
            logger.error("claim of %s: lease lost (%s): %s", self.key, answer.get("status"), answer.get("message", ""))
        else:
            raise Refused(response.status_code, answer)

    def _lose(self) -> None:
        with self._lock:
            if not self.reported:
                self._lost.set()

    def _stop_heartbeat(self) -> None:
        if self._heartbeat and self._heartbeat is not threading.current_thread():
            self._heartbeat.stop()


class Heartbeat(threading.Thread):
    """Extends a claim's lease every ``every`` seconds until stopped or the claim is lost; after a
    failed try it tries again three times as often, so a short outage does not cost the lease."""

    def __init__(self, claim: Claim, *, every: float):
        super().__init__(name=f"opsconsole-claims-heartbeat {claim.key}", daemon=True)
        self.claim = claim
        self.every = every
        self.error: BaseException | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        wait = self.every
        while not self._stopped.wait(wait) and not self.claim.lost:
            try:
                self.claim.extend()
            except (ServiceUnavailable, Refused) as error:
                self.error, wait = error, self.every / 3
                logger.warning("claim of %s: heartbeat failed: %s", self.claim.key, error)
            else:
                self.error, wait = None, self.every

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join()


def _add_note(exc: BaseException, note: str) -> None:
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:  # Python 3.10: PEP 678's attribute, kept for whoever catches it (tracebacks show it from 3.11)
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]


def _describe(exc: BaseException) -> str:
    return _limit(f"{type(exc).__name__}: {exc}") or type(exc).__name__


def _limit(text: str | None) -> str | None:
    return text if text is None or len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT - 1] + "…"


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in body.items() if value is not None}


def _datetime(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _seconds(*values: Any) -> float | None:
    """The first of the values that reads as a number of seconds."""
    for value in values:
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None


def _lease_length(requested: int | None, expires_at: datetime | None, response: httpx.Response) -> float:
    """How long the lease lasts, to heartbeat at a third of it: the length asked for; else the
    expiry against the server's own clock (its Date header), else against ours; else the default."""
    if requested:
        return float(requested)
    if expires_at is None:
        return 60.0
    try:
        now = parsedate_to_datetime(response.headers["Date"])
    except (KeyError, TypeError, ValueError):
        now = datetime.now(timezone.utc)
    return max(5.0, (expires_at - now).total_seconds())
