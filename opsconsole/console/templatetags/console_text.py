"""Text as people read it on the console's pages."""

import json

from django import template

register = template.Library()


@register.filter
def pretty_body(body: str) -> str:
    """A destination's answer body: indented when it is JSON (as kept whole), else as it came."""
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        return body


@register.filter
def beside_name(message) -> str:
    """The form a message belongs beside (``opsconsole.console.decisions.beside``), or ""."""
    for tag in (getattr(message, "extra_tags", "") or "").split():
        if tag.startswith("beside-"):
            return tag.removeprefix("beside-")
    return ""
