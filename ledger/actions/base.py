"""What an action type declares. Definitions are code, not rows; ``registry`` holds one of each."""

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from ledger import keys
from ledger.actions import summaries
from ledger.models.policy import OnConflict
from ledger.outcomes import CannotTell, Success


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def as_dict(self) -> dict:
        return {"field": self.field, "message": self.message}


class UnknownAction(LookupError):
    pass


# Words a humanised field name writes in capitals (``customer_id`` -> "Customer ID").
_ACRONYMS = {"id": "ID", "url": "URL", "http": "HTTP", "api": "API", "iban": "IBAN", "vat": "VAT"}


def humanised(name: str) -> str:
    """A field name as people read it when its schema gives no title: ``amount_cents`` -> "Amount
    cents", ``customer_id`` -> "Customer ID"."""
    words = [_ACRONYMS.get(word.lower(), word.lower()) for word in re.split(r"[_\-\s]+", name) if word]
    if not words:
        return name
    return " ".join([words[0][:1].upper() + words[0][1:], *words[1:]])


def field_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    """Pydantic's errors, one per field. Its messages name the rule, not the value; the submitted
    input is left out on purpose."""
    found = []
    for error in exc.errors(include_input=False, include_url=False):
        path = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        found.append(FieldError(path or "body", error["msg"].removeprefix("Value error, ")))
    return found


@dataclass(frozen=True)
class Limits:
    """How the calls to a destination are spared, for the whole cluster (``ledger.engine.limits``):
    at most ``rate_per_second`` calls begin per second, at most ``concurrency`` are in flight, and
    after ``breaker_threshold`` transient failures in a row calls pause for ``breaker_cooldown``,
    then one probe call decides. None: no such limit."""

    rate_per_second: float | None = None
    concurrency: int | None = None
    breaker_threshold: int | None = None
    breaker_cooldown: timedelta = timedelta(seconds=30)

    @property
    def any(self) -> bool:
        return bool(self.rate_per_second or self.concurrency or self.breaker_threshold)


# ``ActionDefinition.performed_by``: opsconsole's workers, or the caller (ledger.callers).
WORKERS, CALLER = "opsconsole", "caller"


class ActionDefinition:
    # Declared on the class by a coded action; a configured one (ledger.integrations.http_action) sets the
    # same attributes per instance, so only what no configured action sets is a ClassVar.
    name: str
    schema: ClassVar[type[BaseModel]]
    identity_fields: tuple[str, ...] = ("request_id", "version")
    # How each identity field's equivalent spellings become one value (ledger.keys), applied by
    # intake after the schema, before anything is stored, fingerprinted or keyed. Every identity
    # field must declare one (``register`` refuses an action that does not).
    normalisers: dict[str, Callable[[Any], Any]] = {
        "request_id": keys.identifier,
        "version": keys.whole_number,
    }
    fingerprint_fields: tuple[str, ...]
    # Internal effects are rows in our own database, committed with the outcome; external ones
    # call another system, outside any transaction.
    external: bool = False
    honours_idempotency_keys: bool = False
    consequential: bool = False
    max_attempts: int = 5
    backoff_base_seconds: float = 2.0
    backoff_cap_seconds: float = 300.0
    # The processing deadline: how long after it may first run (arrival, or approval when
    # consequential) an operation may still run. Time held by a pause does not count.
    deadline: timedelta = timedelta(hours=24)
    # Consequential actions: how long an approval request waits for a decision before it goes to
    # needs_review ("approval expired").
    approval_window: ClassVar[timedelta] = timedelta(days=7)
    sensitive_fields: tuple[str, ...] = ()
    # What an operation is about, in one line of a list (``ledger.actions.summaries``): a template
    # over the data's fields that are not sensitive, e.g. "{request_id} v{version} · {title}".
    # Empty: its identity without what is sensitive ("{request_id} v{version}").
    summary: str = ""
    # Amounts of money, for people to read ("25.00 EUR"): each amount field (an integer in the
    # currency's minor units) and the field that names its currency (an ISO 4217 code).
    money_fields: dict[str, str] = {}
    # Retention and ordering, the defaults of the action's Policy (ledger.core.policies; a workspace may
    # override them). A finished operation keeps its payload for the payload window, then only a
    # tombstone (key, fingerprint, state, references, times); the tombstone is deleted after the
    # key window, which is also how old an arrival may be before it is refused as stale.
    payload_retention: timedelta = timedelta(days=30)
    key_retention: timedelta = timedelta(days=90)
    ordering: str = "independent"
    # A delivery reusing a key with a changed payload before the operation has run: ``first_wins``
    # (the recorded payload runs unless a person applies the other in time) or ``hold`` (the
    # operation waits in needs_review until a person applies or dismisses the conflict,
    # ``ledger.people.holds``). Not part of the definition's version: it decides what intake does
    # with an arrival, not what a run does.
    on_conflict: str = OnConflict.FIRST_WINS
    # in_order: how long a version waits for a missing predecessor before a person must look.
    gap_wait: ClassVar[timedelta] = timedelta(minutes=10)
    # How long from arrival to a final state the business expects (None: no promise). Past 80 %
    # of it an unfinished operation is at risk, past all of it late (the console's service levels).
    service_level: timedelta | None = None
    # External actions: how long after a try began its request may still land at the
    # destination; reconciliation waits that long before it believes a lookup that finds nothing.
    settle_after: timedelta = timedelta(0)
    # External actions: how many calls of one claimed batch may be in flight at once to this
    # action's destination (``destination_name()``; actions that share one share the smallest
    # cap). Above 1, ``perform`` runs in a pool thread, so it must be thread-safe and must not use
    # the database (a query from a call thread is refused); the default keeps calls one at a time.
    max_concurrency: int = 1
    # Who performs the effect: opsconsole's workers (``perform``), or the caller itself, an
    # automation that claims the operation over HTTP, acts, and reports the outcome
    # (``ledger.callers``, docs/claims.md). A caller-performed action is external (the caller acts
    # outside our database), declares no ``perform``, and is never claimed by a worker. A configured
    # action says it in its integrations file (``performed_by: caller``).
    performed_by: str = WORKERS
    # False: the ledger's own action (``notify``), made by the ledger and never submitted by anyone.
    submittable: ClassVar[bool] = True
    # Caller-performed actions: the lease a claim gets when the caller names none; a caller may
    # ask for any lease within OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN..MAX.
    claim_lease: timedelta = timedelta(seconds=60)
    # Destinations that honour our key: how long they keep one (Stripe: 24 h; None: at least as long
    # as we keep ours). A try whose answer was lost is repeated under the same key only while the
    # first try's key is still kept; after that, a repeat would act twice, so the outcome is unknown
    # and reconciliation (a lookup, or a person) decides.
    idempotency_key_retention: timedelta | None = None

    def validated(self, data: dict) -> tuple[dict | None, list[FieldError]]:
        """``data`` as the schema reads it (None, and each field's error, when it does not)."""
        try:
            return self.schema.model_validate(data).model_dump(mode="json"), []
        except ValidationError as exc:
            return None, field_errors(exc, prefix="data")

    def data_schema(self) -> dict:
        """The JSON Schema of the event's data."""
        return self.schema.model_json_schema()

    def field_names(self) -> list[str]:
        """The data's fields, in the schema's order."""
        return list(self.schema.model_fields)

    def field_titles(self) -> dict[str, str]:
        """The titles the schema gives its fields (``Field(title="Amount")``); pydantic's own
        titles, made from the names, are not titles anyone chose, so they are left out."""
        return {name: field.title for name, field in self.schema.model_fields.items() if field.title}

    def field_label(self, name: str) -> str:
        """What people read for field ``name`` (pages, confirmations): its schema title, else the
        name humanised. Never the raw name: ``amount_cents`` reads "Amount" or "Amount cents"."""
        return self.field_titles().get(name) or humanised(name)

    def summarise(self, payload: dict | None, *, key: str = "") -> str:
        """The operation's line in a list, from its ``payload`` (never a sensitive value); given its
        ``key``, a sensitive identity is told apart by the key's hash of it first (``summaries.identified``)."""
        template = self.summary or summaries.default_template(self.identity_fields, self.sensitive_fields)
        text = summaries.render(template, payload, sensitive=self.sensitive_fields)
        hashed_identity = set(self.identity_fields) & set(self.sensitive_fields)
        return summaries.identified(text, key) if key and hashed_identity else text

    def key_still_kept(self, operation, now) -> bool:
        """Whether the destination still holds the key of ``operation``'s first try (so the same
        request under the same key is answered, not acted on again)."""
        if not self.honours_idempotency_keys:
            return False
        if self.idempotency_key_retention is None:
            return True
        first_try = operation.attempt_rows.order_by("fencing_token").values_list("started_at", flat=True).first()
        # A margin: the vendor's clock and ours differ, and the repeat takes time to arrive.
        return first_try is None or now < first_try + self.idempotency_key_retention * 0.9

    def normalised(self, data: dict) -> tuple[dict, list[FieldError]]:
        """``data`` (as the schema gave it) with each declared field normalised, and the fields
        a normaliser refused."""
        data, errors = dict(data), []
        for name, normalise in self.normalisers.items():
            if name in data:
                try:
                    data[name] = normalise(data[name])
                except ValueError as exc:
                    errors.append(FieldError(f"data.{name}", str(exc)))
        return data, errors

    def check(self, workspace, data: dict) -> list[FieldError]:
        """Business rules the schema cannot state (they depend on the workspace)."""
        return []

    def perform(self, operation) -> Success:
        raise NotImplementedError

    def perform_many(self, operations: list) -> list[Success]:
        """Internal actions may write the effects of many operations at once (a bulk insert):
        one ``Success`` per operation, in order, inside the transaction that records them all as
        succeeded. Optional: an action without it completes one operation at a time."""
        raise NotImplementedError

    @property
    def performed_by_caller(self) -> bool:
        return self.performed_by == CALLER

    @property
    def performs_many(self) -> bool:
        return type(self).perform_many is not ActionDefinition.perform_many

    @property
    def lists_records(self) -> bool:
        """Whether the destination can list the records it created in a window (``list_records``,
        read by the two-way reconciliation audit)."""
        return callable(getattr(self, "list_records", None))

    def destination_name(self) -> str:
        """What ``max_concurrency`` and ``limits`` cap: the system this action calls (by default its
        own name)."""
        return self.name

    def destination_label(self) -> str:
        """What people read for this action's destination, the same on every page (a filter, the
        dashboard's rates and its Destinations panel): its name, unless that is no name to read."""
        return self.destination_name()

    def limits(self) -> Limits:
        """The cluster-wide limits of this action's destination (none by default; a configured
        destination declares its own). Actions that share a destination should declare the same."""
        return Limits()

    def secret_values(self) -> list[str]:
        """The credentials this action's calls carry, as text a destination might echo back: masked
        out of every answer before it is stored (``ledger.core.privacy.scrub_failure``)."""
        return []

    def lookup(self, operation):
        """Ask the destination about ``operation``: ``Found``, ``Absent`` or ``CannotTell``."""
        return CannotTell(f"action {self.name} cannot look its records up at the destination", final=True)

    def first_deadline(self, now):
        """The deadline an operation starts with: its approval window when consequential (the
        processing deadline starts at approval), else its processing deadline."""
        return now + (self.approval_window if self.consequential else self.deadline)

    @cached_property
    def definition(self) -> dict:
        """What the code of the action says: schema, identity and fingerprint, retries, deadlines."""
        return {
            "schema": self.data_schema(),
            "identity": list(self.identity_fields),
            "normalisers": {name: normalise.__name__ for name, normalise in sorted(self.normalisers.items())},
            "fingerprint": list(self.fingerprint_fields),
            "external": self.external,
            "idempotency_keys": self.honours_idempotency_keys,
            "consequential": self.consequential,
            "retry": [self.max_attempts, self.backoff_base_seconds, self.backoff_cap_seconds],
            "deadline": self.deadline.total_seconds(),
            "approval_window": self.approval_window.total_seconds(),
            **self._caller_definition(),
            **self.definition_extras(),
        }

    def definition_extras(self) -> dict:
        """What else defines the action (a configured action's request); none for a coded one, so
        the versions of the coded actions stay as they were."""
        return {}

    def _caller_definition(self) -> dict:
        # Only where it differs from the default: the versions of every other action stay as they were.
        if not self.performed_by_caller:
            return {}
        return {"performed_by": CALLER, "claim_lease": self.claim_lease.total_seconds()}

    @cached_property
    def version(self) -> str:
        """A short hash of the definition, stored on each operation: a changed definition shows."""
        encoded = json.dumps(self.definition, sort_keys=True, default=str).encode()
        return hashlib.sha256(encoded).hexdigest()[:12]

    def configuration(self) -> dict:
        """Everything that changes what the action does, read now (settings may change between
        deploys): its definition, and what it is not in the code, such as its destination. The
        workspace's policy is added by ``ledger.core.configuration``, which stores each distinct one."""
        return {
            **self.definition,
            "settle_after": self.settle_after.total_seconds(),
            "sensitive_fields": list(self.sensitive_fields),
            "max_concurrency": self.max_concurrency,
        }


class Registry(Mapping):
    """Every action type by name: the coded ones (``register``) and the HTTP actions configured as
    rows (``ledger.integrations.configured``, read again when they change). A coded action's name is
    never a configured one's (saving refuses it)."""

    def __init__(self):
        self.coded: dict[str, ActionDefinition] = {}
        # Set by ledger.integrations.configured: the configured actions as of now.
        self.configured: Callable[[], Mapping[str, ActionDefinition]] = dict

    def __getitem__(self, name: str) -> ActionDefinition:
        try:
            return self.coded[name]
        except KeyError:
            return self.configured()[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.coded
        yield from (name for name in self.configured() if name not in self.coded)

    def __len__(self) -> int:
        return len(self.coded.keys() | self.configured().keys())


registry = Registry()


def register(cls: type[ActionDefinition]) -> type[ActionDefinition]:
    if cls.name in registry.coded:
        raise ValueError(f"Action {cls.name!r} is registered twice.")
    if undeclared := [name for name in cls.identity_fields if name not in cls.normalisers]:
        raise ValueError(f"Action {cls.name!r} declares no normaliser for its identity fields {undeclared}.")
    if cls.summary and (
        wrong := summaries.problems(cls.summary, fields=list(cls.schema.model_fields), sensitive=cls.sensitive_fields)
    ):
        raise ValueError(f"Action {cls.name!r}: {'; '.join(wrong)}.")
    if problem := _caller_problem(cls):
        raise ValueError(f"Action {cls.name!r} {problem}.")
    if cls.on_conflict not in OnConflict.values:
        raise ValueError(
            f"Action {cls.name!r} declares on_conflict {cls.on_conflict!r}: say "
            f"{' or '.join(repr(value) for value in OnConflict.values)}."
        )
    registry.coded[cls.name] = cls()
    return cls


def _caller_problem(cls: type[ActionDefinition]) -> str:
    """What a declared ``performed_by`` gets wrong, if anything."""
    if cls.performed_by not in (WORKERS, CALLER):
        return f"is performed_by {cls.performed_by!r}: say {WORKERS!r} or {CALLER!r}"
    if cls.performed_by != CALLER:
        return ""
    if not cls.external:
        return "is performed by the caller, outside our database: declare it external"
    if cls.perform is not ActionDefinition.perform or cls.perform_many is not ActionDefinition.perform_many:
        return "is performed by the caller: it declares no perform"
    return ""


def get_action(name: str) -> ActionDefinition:
    try:
        return registry[name]
    except KeyError:
        raise UnknownAction(name) from None
