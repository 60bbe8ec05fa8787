"""Texts that mention a time keep the time as data: the words say ``{name}`` where the
time goes, and the times are kept beside them, by name, as ISO 8601 in UTC (``AuditEvent.times``,
``Operation.last_error_times``). Each reader puts them back in its own way: the
console in the person's time zone, the API as ISO 8601 with the offset, an export in the zone its
header names.

A text written before times were kept apart (no times beside it) reads as it was written. Only the
names its times hold are filled, so braces that are not a kept time (a destination's JSON quoted in a
reason) stay as they are.
"""

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

PLACEHOLDER = re.compile(r"\{([a-z][a-z_]*)\}")

Times = dict[str, str]


def kept(**moments: datetime | None) -> Times:
    """``moments`` as a text's times: each as ISO 8601 in UTC, by its name (those that are None left out)."""
    return {name: moment.astimezone(UTC).isoformat() for name, moment in moments.items() if moment is not None}


def moment(times: Times, name: str) -> datetime:
    return datetime.fromisoformat(times[name])


def pieces(words: str, times: Times | None) -> Iterator[str | datetime]:
    """``words`` in order: its text, and at each ``{name}`` its times hold, that time."""
    if not times:
        yield words
        return
    start = 0
    for match in PLACEHOLDER.finditer(words):
        if match.group(1) not in times:
            continue
        yield words[start : match.start()]
        yield moment(times, match.group(1))
        start = match.end()
    yield words[start:]


def filled(words: str, times: Times | None, show: Callable[[datetime], str]) -> str:
    """``words`` with each kept time written by ``show``."""
    return "".join(show(piece) if isinstance(piece, datetime) else piece for piece in pieces(words, times))


def iso(moment: datetime) -> str:
    """A time as the API writes it: ISO 8601 to the second, with its offset (UTC: ``+00:00``)."""
    return moment.isoformat(timespec="seconds")


def as_iso(words: str, times: Times | None) -> str:
    """``words`` with each kept time in ISO 8601 (UTC), as machines read them."""
    return filled(words, times, iso)


def duration_text(duration: timedelta) -> str:
    """A length of time as a person reads it: 42 s, 7 min, 3 h 5 min, 2 d 4 h."""
    seconds = int(duration.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def promised_text(duration: timedelta) -> str:
    """A length of time someone set, in the words ``duration_text`` uses and at the precision it
    was set (30 min, 2 d, 1 h 30 min, 90 s), so a wait and the promise it is measured against
    read alike."""
    seconds, parts = int(duration.total_seconds()), []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
    return " ".join(parts) or "0 s"
