"""Requests to opsconsole, retried while the service itself fails.

A connection error, a timeout or a 5xx answer is retried with exponential backoff and jitter (a
Retry-After header wins over the computed delay), at most ``max_retries`` times, then raised as
`ServiceUnavailable`. Any other answer (2xx, 4xx) is returned to the caller to read.

Every request this client sends may be sent again without a second effect: a claim answered again is
the operation's current answer, a report repeated with the same token and body is answered as the
first one was, an event sent again is a duplicate of itself, and a pause pulled again is the same
switch. A decision (approve, replay, cancel...) whose answer was lost, sent again, is refused by the
state it left (409 ``wrong_state``), and a resume by the switch it released (404), rather than taken
twice: the caller reads the operation, or the pauses, to see where they stand.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import httpx

from opsconsole_claims.errors import ServiceUnavailable

USER_AGENT = "opsconsole-claims/0.1.0"
# time.sleep, looked up here so that tests can stand a recorder in for it.
sleep = time.sleep


class Transport:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float,
        max_retries: int,
        backoff: float,
        max_backoff: float,
        transport: httpx.BaseTransport | None = None,
    ):
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT},
            timeout=timeout,
            transport=transport,
        )

    def post(
        self, path: str, body: dict[str, Any], *, retries: int | None = None
    ) -> tuple[httpx.Response, dict[str, Any]]:
        return self.send("POST", path, body=body, retries=retries)

    def send(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str | int] | None = None,
        retries: int | None = None,
    ) -> tuple[httpx.Response, dict[str, Any]]:
        """The first answer that is not the service's own failure, and its JSON body. The service
        failing: a network error, a 5xx, a proxy's 408 or 429, or an answer that is no JSON object
        (a proxy's page, an empty body). Without ``body`` the request has none (as `curl -X POST`
        sends it)."""
        retries = self.max_retries if retries is None else retries
        failure: httpx.TransportError | None
        for attempt in range(1, retries + 2):
            try:
                response = self.http.request(method, path, json=body, params=params)
            except httpx.TransportError as error:
                failure, status_code, retry_after = error, None, None
            else:
                status_code, retry_after = response.status_code, _retry_after(response)
                answer = None if _service_failure(status_code) else _json_object(response)
                if answer is not None:
                    return response, answer
                failure = None
            if attempt > retries:
                raise ServiceUnavailable(
                    f"opsconsole did not answer {method} {path} after {attempt} attempts: "
                    + (f"{type(failure).__name__}: {failure}" if failure else f"HTTP {status_code}"),
                    attempts=attempt,
                    status_code=status_code,
                    retry_after=retry_after,
                ) from failure
            sleep(self.delay(attempt, retry_after))
        raise AssertionError("unreachable")

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds before the next attempt: the server's Retry-After if it gave one, else
        backoff * 2^(attempt-1) with equal jitter; never more than max_backoff."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        ceiling = min(self.backoff * 2.0 ** (attempt - 1), self.max_backoff)
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def close(self) -> None:
        self.http.close()


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (RFC 9110 also allows a date; opsconsole sends seconds)."""
    try:
        return max(0.0, float(response.headers["Retry-After"]))
    except (KeyError, ValueError):
        return None


def _service_failure(status_code: int) -> bool:
    """A 5xx, or a proxy's timeout (408) or rate limit (429): opsconsole itself sends neither."""
    return status_code >= 500 or status_code in (408, 429)


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    """The answer's JSON object; None when it is none (a proxy's page, an empty body): not
    opsconsole's answer, so the service failing."""
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None
