"""The stand-in destination's scripted failures as the console shows them: how many of its next calls
and lookups fail because the demo day or a test queued faults (the stand-in's ``GET /_faults/count``).

Asked only when ``OPSCONSOLE_SHOW_STANDIN_FAULTS`` is on (`make demo` sets it), with a short timeout:
a stand-in that does not answer shows nothing, and a page never waits long for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from django.conf import settings

from ledger.actions import http

# A page waits at most this for the stand-in (local, answering in a millisecond when it runs).
TIMEOUT_SECONDS = 0.3


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
    url = settings.OPSCONSOLE_STANDIN_URL.rstrip("/")
    try:
        counts = httpx.get(f"{url}/_faults/count", timeout=TIMEOUT_SECONDS).raise_for_status().json()
        found = Queued(calls=int(counts["create"]), lookups=int(counts["lookup"]), url=url)
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    return found if found.total > 0 else None


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
