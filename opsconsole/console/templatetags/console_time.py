"""Times as a person reads them: in their time zone (``opsconsole.middleware.TimeZoneMiddleware``
activates the browser's), with the zone's name, e.g. ``2026-12-01 17:04:05 CET``.

``{{ value|when }}`` is a ``<time>`` element whose ``datetime`` carries the same instant in ISO
8601 with its offset; ``{{ value|when_text }}`` is the text alone (for a title, or a sentence a
view writes). Both show "—" for no time.

``{{ since|when_span:until }}`` is a range in minutes: ``13:26–14:26 CET`` when both ends fall on
today, with the date wherever a day could be mistaken (``2026-12-04 13:26 – 2026-12-05 13:26 CET``,
or ``2026-12-04 13:26–14:26 CET`` for another single day): a 24-hour window reads as such.

``{{ event.message|with_times:event.times }}`` is a stored text whose times are kept apart
(``ledger.timed``): its words, escaped, with each time as ``when`` writes it. A text of before
(no times) reads as it was written.
"""

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

from ledger import timed

register = template.Library()

NO_TIME = "—"


@register.filter
def when_text(value: datetime | None) -> str:
    if not value:
        return NO_TIME
    local = timezone.localtime(value)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


@register.filter
def when(value: datetime | None) -> str:
    if not value:
        return NO_TIME
    return format_html(
        '<time datetime="{}">{}</time>', timezone.localtime(value).isoformat(timespec="seconds"), when_text(value)
    )


@register.filter
def when_span(since: datetime | None, until: datetime | None) -> str:
    if not since or not until:
        return NO_TIME
    start, end = timezone.localtime(since), timezone.localtime(until)
    if start.date() != end.date():
        first, last, dash = f"{start:%Y-%m-%d %H:%M}", f"{end:%Y-%m-%d %H:%M}", " – "
    else:
        day = "" if start.date() == timezone.localdate() else f"{start:%Y-%m-%d} "
        first, last, dash = f"{day}{start:%H:%M}", f"{end:%H:%M}", "–"
    return format_html(
        '<time datetime="{}">{}</time>{}<time datetime="{}">{}</time> {}',
        start.isoformat(timespec="seconds"),
        first,
        dash,
        end.isoformat(timespec="seconds"),
        last,
        end.tzname(),
    )


@register.filter
def with_times(words: str, times: dict | None) -> str:
    return mark_safe(
        "".join(
            when(piece) if isinstance(piece, datetime) else conditional_escape(piece)
            for piece in timed.pieces(words or "", times)
        )
    )


def text_with_times(words: str, times: dict | None) -> str:
    """A stored text with its times in the person's zone, as plain text (a message a view writes)."""
    return timed.filled(words, times, when_text)
