"""The stand-in destination's scripted failures as the console shows them: how many of its next calls
and lookups fail because the demo day or a test queued faults (the stand-in's ``GET /_faults/count``).

Asked only when ``OPSCONSOLE_SHOW_STANDIN_FAULTS`` is on (`make demo` sets it), on a thread the page
waits for at most ``DEADLINE_SECONDS``: httpx's timeout bounds each read, not the answer, so a
stand-in that answers a byte at a time would otherwise hold the page. A stand-in that does not
answer in time shows nothing; while one question is still waiting, the next page does not ask.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import httpx
from django.conf import settings

from ledger.actions import http

# Each connect and read of the question (the stand-in is local, answering in a millisecond when it runs).
TIMEOUT_SECONDS = 0.3
# A page waits at most this for the whole answer.
DEADLINE_SECONDS = 2 * TIMEOUT_SECONDS
# One question in flight: a stand-in that stalls holds one thread, never one per page.
_asking = threading.Lock()


@dataclass(frozen=True)
class Queued:
    calls: int
    lookups: int
    url: str

    @property
    def total(self) -> int:
        return self.calls + self.lookups


def queued() -> Queued | None:
    """The faults queued at the stand-in, or None when none are, the console is not told to ask, or
    the stand-in does not answer as it should."""
    if not settings.OPSCONSOLE_SHOW_STANDIN_FAULTS:
        return None
    if not _asking.acquire(blocking=False):
        return None  # the last question is still waiting for its answer
    url = settings.OPSCONSOLE_STANDIN_URL.rstrip("/")
    answer: list[Queued | None] = []

    def ask() -> None:
        try:
            answer.append(_asked(url))
        finally:
            _asking.release()

    thread = threading.Thread(target=ask, name="standin-faults", daemon=True)
    thread.start()
    thread.join(DEADLINE_SECONDS)
    found = answer[0] if answer else None
    return found if found is not None and found.total > 0 else None


def _asked(url: str) -> Queued | None:
    try:
        counts = httpx.get(f"{url}/_faults/count", timeout=TIMEOUT_SECONDS).raise_for_status().json()
        return Queued(calls=int(counts["create"]), lookups=int(counts["lookup"]), url=url)
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def calls_the_standin(definition) -> bool:
    """Whether an action's calls or lookups reach the stand-in: a coded stand-in action, or a
    configured one whose destination's base URL is the stand-in's."""
    if definition is None:
        return False
    standin = http.origin(settings.OPSCONSOLE_STANDIN_URL)
    if definition.destination_name() == standin:
        return True
    base_url = getattr(getattr(definition, "destination", None), "base_url", "")
    return bool(base_url) and http.origin(base_url) == standin
