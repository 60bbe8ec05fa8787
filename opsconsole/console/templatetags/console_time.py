"""Times as a person reads them: in their time zone (``opsconsole.middleware.TimeZoneMiddleware``
activates the browser's), with the zone's name, e.g. ``2026-12-01 17:04:05 CET``.

``{{ value|when }}`` is a ``<time>`` element whose ``datetime`` carries the same instant in ISO
8601 with its offset; ``{{ value|when_text }}`` is the text alone (for a title, or a sentence a
view writes). Both show "—" for no time.
"""

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html

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
