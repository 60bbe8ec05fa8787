"""Text as people read it on the console's pages."""

import json

from django import template

from ledger import states

register = template.Library()


@register.filter
def pretty_body(body: str) -> str:
    """A destination's answer body: indented when it is JSON (as kept whole), else as it came."""
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        return body


@register.filter
def state_label(state: str) -> str:
    """A state as people read it: "needs_review" is "Needs review" (``ledger.states.LABELS``)."""
    return states.label(state)
