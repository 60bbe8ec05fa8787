"""POSTs to opsconsole, retried while the service itself fails.

A connection error, a timeout or a 5xx answer is retried with exponential backoff and jitter (a
Retry-After header wins over the computed delay), at most ``max_retries`` times, then raised as
`ServiceUnavailable`. Every request this client sends is safe to send again: a claim answered again
is the operation's current answer, and a report repeated with the same token and body is answered as
the first one was. Any other answer (2xx, 4xx) is returned to the caller to read.
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

    def post(self, path: str, body: dict[str, Any], *, retries: int | None = None) -> tuple[httpx.Response, dict]:
        """The first answer that is not the service's own failure, and its JSON body."""
        retries = self.max_retries if retries is None else retries
        failure: httpx.TransportError | None
        for attempt in range(1, retries + 2):
            try:
                response = self.http.post(path, json=body)
            except httpx.TransportError as error:
                failure, status_code, retry_after = error, None, None
            else:
                if response.status_code < 500:
                    return response, _json_body(response)
                failure, status_code, retry_after = None, response.status_code, _retry_after(response)
            if attempt > retries:
                raise ServiceUnavailable(
                    f"opsconsole did not answer POST {path} after {attempt} attempts: "
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
        ceiling = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def close(self) -> None:
        self.http.close()


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (RFC 9110 also allows a date; opsconsole sends seconds)."""
    try:
        return max(0.0, float(response.headers["Retry-After"]))
    except (KeyError, ValueError):
        return None


def _json_body(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"status": "", "message": response.text[:200]}
    return body if isinstance(body, dict) else {"status": "", "message": str(body)[:200]}
