"""Text as people read it on the console's pages."""

import json
import re
from dataclasses import dataclass

from django import template

from ledger import states
from ledger.core import privacy, sensitive_notes
from opsconsole.console.forms import BESIDE

register = template.Library()


@register.filter
def pretty_body(body: str) -> str:
    """A destination's answer body: indented when it is JSON (as kept whole), else as it came."""
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        return body


@register.simple_tag
def answer_shown_to(attempt, user) -> privacy.ShownAnswer | None:
    """``{% answer_shown_to attempt user as shown %}``: ``privacy.answer_shown_to``."""
    return privacy.answer_shown_to(user, attempt)


@register.filter
def readers(where) -> str:
    """Who reads a note written here: ``{{ operation.workspace|readers }}`` (``sensitive_notes.readers_of``)."""
    return sensitive_notes.readers_of(where)


@register.filter
def refused_beside(messages, field_id: str) -> str:
    """The refusal of the note written in the field ``field_id``, shown beside it
    (``opsconsole.console.forms.report_refusal``); "" when there is none."""
    tag = f"{BESIDE}{field_id}"
    return next((str(message) for message in messages or () if message.extra_tags == tag), "")


@register.simple_tag(takes_context=True)
def said_beside(context, message) -> bool:
    """Whether ``message`` is said beside a field of the page (the banner then only points to it):
    it names a field (``forms.report_refusal``), and the page shows that field. A page that lists
    the fields it shows (``beside_fields``, the operation page) gets in the banner, in full, a
    refusal whose form is gone (the operation moved on meanwhile)."""
    tags = getattr(message, "extra_tags", "") or ""
    if not tags.startswith(BESIDE):
        return False
    shown = context.get("beside_fields")
    return shown is None or tags.removeprefix(BESIDE) in shown


@register.filter
def state_label(state: str) -> str:
    """A state as people read it: "needs_review" is "Needs review" (``ledger.states.LABELS``)."""
    return states.label(state)


# A refusal's message as ``ledger.actions.answers.failure_message`` writes it: the status, the host,
# the destination's code in brackets, then its words.
_REFUSAL = re.compile(
    r"^HTTP (?P<status>[1-5][0-9][0-9])(?: from [^\s\[]+?)?(?: \[(?P<code>[^\s\[\]]{1,80})\])?(?:: (?P<said>.*))?$",
    re.S,
)


@dataclass(frozen=True)
class ErrorParts:
    headline: str  # "HTTP 422 [invalid_amount]": what tells refusals apart, read first
    rest: str  # the destination's words (or the whole message when it is no HTTP refusal)


@register.filter
def error_parts(message: str) -> ErrorParts:
    """A last error split for a narrow cell: the status and the destination's code first (the host
    left out: the action names it), then the words, which may be cut."""
    refusal = _REFUSAL.match(message or "")
    if refusal is None:
        return ErrorParts("", message or "")
    code = f" [{refusal['code']}]" if refusal["code"] else ""
    return ErrorParts(f"HTTP {refusal['status']}{code}", refusal["said"] or "")
