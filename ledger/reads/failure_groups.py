"""Failure groups: the operations that need review because they failed the same way, counted.

An operation's way of failing is its action, its error category and its error message made
general (``signature``): numbers, uuids, long hexadecimal ids, addresses and quoted values become
placeholders, so that "owner 4711 does not exist" and "owner 4712 does not exist" are one group.
An HTTP status is kept as it is: "HTTP 400 from <ip>" and "HTTP 409 from <ip>" are two groups (the
message of an HTTP failure names the status of the attempt that failed last). So is the destination's
own error code, which a refusal's message carries in brackets (``ledger.actions.answers``), and the
destination's words after a code are left out: "HTTP 400 from <ip> [card_declined]: ..." is one group
however the vendor words it, and a group per code; without a code, its words (made general) group.

Only ``needs_review`` operations are grouped: they are the unfinished failures a person decides
(``unknown`` ones are the reconciler's until it gives up, and then they need review too). The
database counts each distinct message once (``operation_failure_idx`` holds exactly these rows,
so the count reads that index and no other row); the messages are then made general here and
merged, and only the largest groups are shown.
"""

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache, reduce
from operator import or_

from django.db.models import Count, Max, Min, Q, QuerySet

from ledger.models import Attempt, Operation
from ledger.states import State

GROUPED_STATE = State.NEEDS_REVIEW
# The distinct (action, category, message) rows read per view, largest first: past this, rarer
# messages are left out (and the page says so) rather than read at any cost.
MESSAGES_READ = 1_000
GROUPS_SHOWN = 50

# Placeholder -> the text it stands for, as a regular expression both Python's ``re`` and
# PostgreSQL's advanced expressions read the same way (no \b, \d or lookarounds).
_PATTERNS = {
    "<uuid>": "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "'<value>'": "'[^']*'",
    '"<value>"': '"[^"]*"',
    "<ip>": "[0-9]{1,3}[.][0-9]{1,3}[.][0-9]{1,3}[.][0-9]{1,3}(?::[0-9]+)?",
    "<id>": "[0-9a-fA-F]{12,}",  # a hash or a hexadecimal record id (no word has twelve hex letters)
    "<n>": "[0-9]+",
}
_HTTP_STATUS = "HTTP [1-5][0-9][0-9]"
_ERROR_CODE = r"\[[^\s\[\]]{1,80}\]"  # ledger.actions.answers.CODE, in brackets
# Tried in this order at each position: an HTTP status is kept before its digits could be a number.
_GENERAL = re.compile(
    "|".join(
        [f"(?P<keep>{_HTTP_STATUS}|{_ERROR_CODE})"]
        + [f"(?P<p{index}>{pattern})" for index, pattern in enumerate(_PATTERNS.values())]
    )
)
_PLACEHOLDERS = list(_PATTERNS)
# What follows a destination's error code: its words, left out of the signature.
_SAID = ": <said>"
_CODED = re.compile(rf"^(.*?{_ERROR_CODE})(: .*)?$", re.DOTALL)


@lru_cache(maxsize=4_096)  # the same messages come back on every view of the page
def signature(message: str) -> str:
    """``message`` with what varies between operations replaced by placeholders, and the words after
    a destination's error code left out."""

    def replace(match: re.Match) -> str:
        if match.group("keep") or match.lastgroup is None:
            return match.group(0)
        return _PLACEHOLDERS[int(match.lastgroup[1:])]

    if coded := _CODED.match(message):
        return _GENERAL.sub(replace, coded.group(1)) + _SAID
    return _GENERAL.sub(replace, message)


def message_pattern(general: str) -> str:
    """A regular expression (anchored) matching the messages whose ``signature`` is ``general``."""
    said = general.endswith(_SAID)
    general = general.removesuffix(_SAID) if said else general
    tokens = re.split("(" + "|".join(re.escape(placeholder) for placeholder in _PLACEHOLDERS) + ")", general)
    parts = [f"({_PATTERNS[token]})" if token in _PATTERNS else _literal(token) for token in tokens if token]
    return "^" + "".join(parts) + ("(: .*)?" if said else "") + "$"


def _literal(text: str) -> str:
    # Backslash before every character that is not a letter or digit: a literal in both dialects.
    return "".join(char if char.isalnum() and char.isascii() else "\\" + char for char in text)


@dataclass(frozen=True)
class Criterion:
    """What the operations of one group share; ``str()`` is its form in a URL (``?group=``)."""

    action: str
    category: str
    general: str

    SEPARATOR = "|"

    def __str__(self):
        return self.SEPARATOR.join([self.action, self.category, self.general])

    @classmethod
    def parse(cls, text: str) -> "Criterion | None":
        parts = (text or "").split(cls.SEPARATOR, 2)
        return cls(*parts) if len(parts) == 3 and parts[0] else None

    @property
    def digest(self) -> str:
        return hashlib.sha256(str(self).encode()).hexdigest()[:16]

    def filter(self) -> Q:
        """The operations of this group, as a filter (a regular expression on the message: it may
        take in a message that only looks general, such as one holding "<n>" itself; ``matches``
        tells them apart)."""
        return Q(
            state=GROUPED_STATE,
            action=self.action,
            last_error_category=self.category,
            last_error_message__regex=message_pattern(self.general),
        )

    @property
    def message(self) -> str:
        """The general message for people: without its category, which it may begin with
        ("permanent: ..."), and "…" for the destination's words after its code."""
        general = self.general.removeprefix(f"{self.category}: ") if self.category else self.general
        return general.removesuffix(_SAID) + ": …" if general.endswith(_SAID) else general

    def matches(self, operation: Operation) -> bool:
        return (
            operation.state == GROUPED_STATE
            and operation.action == self.action
            and operation.last_error_category == self.category
            and signature(operation.last_error_message) == self.general
        )


@dataclass
class Group:
    criterion: Criterion
    count: int
    first_seen: datetime
    last_seen: datetime
    examples: list[str] = field(default_factory=list)  # a few of the messages, as they are
    # The latest answered try of an operation failing with the first example (``example_answers``).
    answer: Attempt | None = None

    @property
    def message(self) -> str:
        return self.criterion.message


def failure_groups(operations: QuerySet, *, shown: int = GROUPS_SHOWN) -> tuple[list[Group], bool]:
    """The largest groups of failed ``operations`` (a queryset already narrowed to what the person
    may see), largest first, and whether some were left out (more groups than ``shown``, or more
    distinct messages than are read)."""
    rows = list(
        operations.filter(state=GROUPED_STATE)
        .values("action", "last_error_category", "last_error_message")
        # COUNT(*), not of the id: the id is not in the index, and reading it would read every row.
        .annotate(n=Count("*"), first=Min("updated_at"), last=Max("updated_at"))
        .order_by("-n", "action", "last_error_category", "last_error_message")[: MESSAGES_READ + 1]
    )
    capped = len(rows) > MESSAGES_READ
    groups: dict[Criterion, Group] = {}
    for row in rows[:MESSAGES_READ]:
        criterion = Criterion(row["action"], row["last_error_category"], signature(row["last_error_message"]))
        group = groups.get(criterion)
        if group is None:
            groups[criterion] = Group(criterion, row["n"], row["first"], row["last"], [row["last_error_message"]])
            continue
        group.count += row["n"]
        group.first_seen, group.last_seen = min(group.first_seen, row["first"]), max(group.last_seen, row["last"])
        if len(group.examples) < 3:
            group.examples.append(row["last_error_message"])
    ordered = sorted(groups.values(), key=lambda g: (-g.count, -g.last_seen.timestamp(), str(g.criterion)))
    return ordered[:shown], capped or len(ordered) > shown


def example_answers(groups: list[Group], operations: QuerySet) -> None:
    """Give each group an example of what the destination said: the last answered try of the most
    recently failed operation with the group's first example message. Two reads for all the groups:
    one operation per message (along ``operation_failure_idx``), then one try per operation."""
    if not groups:
        return
    by_message = {(g.criterion.action, g.criterion.category, g.examples[0]): g for g in groups}
    shown = reduce(
        or_,
        [Q(action=action, last_error_category=category, last_error_message=m) for action, category, m in by_message],
    )
    latest = (
        operations.filter(shown, state=GROUPED_STATE)
        .order_by("action", "last_error_category", "last_error_message", "-updated_at")
        .distinct("action", "last_error_category", "last_error_message")
        .values_list("pk", "action", "last_error_category", "last_error_message")
    )
    group_of = {pk: by_message[(action, category, message)] for pk, action, category, message in latest}
    answered = (
        Attempt.objects.filter(operation_id__in=list(group_of), http_status__isnull=False)
        .order_by("operation_id", "-number")
        .distinct("operation_id")
    )
    for attempt in answered:
        group_of[attempt.operation_id].answer = attempt
