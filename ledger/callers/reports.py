"""A caller's report of what its claimed try came to: ``succeeded`` (with the destination's record
id and result), ``failed`` (transient: retried with backoff within the attempt limit and the
workspace's retry budget, as any action; permanent: review) or ``unknown`` (a lookup or a person
decides). Fenced by the claim's token; the same report sent again is answered as it was, and a
different one under the same claim is refused (``outcome_conflict``).

A ``succeeded`` report is one database call and one commit (``ledger_report_outcome``,
``sql/report_outcome.sql``): the call fences it by the claim's token and records it, returning
the move's audit event for Python to seal and insert with the COMMIT; nothing is compiled by the
ORM on that path. What it does not decide goes the Python way (the ORM, one transaction):
``failed`` and ``unknown`` reports (their next state weighs the attempt limit, the backoff and the
workspace's retry budget, and their error text is masked against the payload first), reports in a
workspace with subscriptions (a move is announced in its transaction), a key whose last part names
no action its caller performs, and an overdue claim (moved as the sweep would, after the call).
"""

import hashlib
import json
from typing import Annotated, Any, Literal
from urllib.parse import unquote

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict, JsonValue

from ledger.actions import FieldError, get_action, registry
from ledger.actions.base import field_errors
from ledger.callers.claims import (
    Answer,
    current_claim,
    keyed,
    lease_problem,
    locked,
    no_such_operation,
    stale_after,
)
from ledger.callers.tokens import claim_in, claim_of
from ledger.core import accounts, announcements, audit_chain, contention, privacy, tallies
from ledger.core.rows import dumps, from_json
from ledger.core.transitions import log_transition
from ledger.engine.attempts import finish_attempt
from ledger.engine.failed import write_failure
from ledger.engine.succeeded import record_success
from ledger.intake.decoding import storable_text_problem, unstorable_errors
from ledger.models import Attempt, Operation, Workspace
from ledger.outcomes import AmbiguousError, OutcomeError, PermanentError, Success, TransientError
from ledger.states import State

# A succeeded report, fenced and recorded in one statement (sql/report_outcome.sql).
CALL = "SELECT ledger_report_outcome(%s::jsonb)"

RECORDED = "recorded"
OUTCOME_CONFLICT = "outcome_conflict"

Printable = Annotated[StrictStr, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]


def _null(*fields: str) -> JsonDict:
    return {"properties": {field: {"type": "null"} for field in fields}}


def _is(field: str, value: str) -> JsonDict:
    return {"properties": {field: {"const": value}}, "required": [field]}


# The rules of ``_fits_the_outcome`` in JSON Schema, so the document's readers and fuzzers see them;
# the model validator still checks them and words the answer.
OUTCOME_RULES: list[JsonValue] = [
    {  # `category` exactly for a failed outcome
        "if": _is("outcome", "failed"),
        "then": {"required": ["category"], "properties": {"category": {"enum": ["transient", "permanent"]}}},
        "else": _null("category"),
    },
    # `external_id` and `result` for a succeeded outcome only, `error` for the others
    {"if": _is("outcome", "succeeded"), "then": _null("error"), "else": _null("external_id", "result")},
    {"if": _is("category", "transient"), "else": _null("retry_after")},  # for a transient failure only
]


class OutcomeReport(BaseModel):
    """What the caller's try came to."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": OUTCOME_RULES})

    token: Annotated[StrictStr, StringConstraints(min_length=1, max_length=300)] = Field(
        description="The token the claim was answered with."
    )
    outcome: Literal["succeeded", "failed", "unknown"]
    category: Literal["transient", "permanent"] | None = Field(
        None,
        description=(
            "Required when `outcome` is `failed`, and only then: `transient` (may work later: retried) or "
            "`permanent` (a person looks)."
        ),
    )
    external_id: Printable | None = Field(None, description="For `succeeded`: the destination's record id.")
    result: dict[str, Any] | None = Field(None, description="For `succeeded`: what later claims are answered.")
    error: Annotated[StrictStr, StringConstraints(max_length=500)] | None = Field(
        None, description="For `failed` and `unknown`: what happened, for people (no payload values)."
    )
    retry_after: Annotated[float, Field(ge=0, le=86400)] | None = Field(
        None, description="For a transient failure: the destination's Retry-After, in seconds."
    )

    @model_validator(mode="after")
    def _fits_the_outcome(self):
        failed = self.outcome == "failed"
        if failed != (self.category is not None):
            raise ValueError("`category` is required for a failed outcome, and only for it")
        if self.outcome != "succeeded" and (self.external_id is not None or self.result is not None):
            raise ValueError("`external_id` and `result` are for a succeeded outcome only")
        if self.outcome == "succeeded" and self.error is not None:
            raise ValueError("`error` is for a failed or unknown outcome only")
        if self.retry_after is not None and self.category != "transient":
            raise ValueError("`retry_after` is for a transient failure only")
        return self

    def digest(self) -> str:
        """The report without its token, as one value: the same report sent again has the same."""
        body = self.model_dump(exclude={"token"})
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()

    def error_of(self) -> OutcomeError:
        if self.outcome == "unknown":
            return AmbiguousError(self.error or "the caller cannot tell whether it acted")
        if self.category == "permanent":
            return PermanentError(self.error or "the caller reported a permanent failure")
        return TransientError(self.error or "the caller reported a transient failure", retry_after=self.retry_after)


class Heartbeat(BaseModel):
    """A claim's holder, still at work, extends its lease."""

    model_config = ConfigDict(extra="forbid")

    token: Annotated[StrictStr, StringConstraints(min_length=1, max_length=300)]
    # The bounds are published in the schema but checked by ``lease_problem``, whose answer is the
    # claim's own (pydantic's ``ge``/``le`` would answer in other words).
    lease_seconds: (
        Annotated[
            StrictInt,
            WithJsonSchema(
                {
                    "type": "integer",
                    "minimum": settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN,
                    "maximum": settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX,
                }
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            f"The new lease from now, in seconds ({settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN} to "
            f"{settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX}); default the action's."
        ),
    )

    @field_validator("lease_seconds")
    @classmethod
    def _bounded(cls, value):
        if (problem := lease_problem(value)) is not None:
            raise ValueError(problem[1])
        return value


def read(model: type[BaseModel], raw: Any) -> tuple[Any, list[dict]]:
    """``raw`` (decoded JSON) as ``model``, or the problems with it (field and rule, never the value)."""
    if not isinstance(raw, dict):
        return None, [FieldError("body", "must be a JSON object").as_dict()]
    if unstorable := unstorable_errors(raw):
        return None, [error.as_dict() for error in unstorable]
    try:
        return model.model_validate(raw), []
    except ValidationError as exc:
        return None, [error.as_dict() for error in field_errors(exc)]


def report_outcome(
    *, workspace: Workspace, key: str, report: OutcomeReport, actor: str, token: dict | None = None
) -> Answer:
    """Record ``report`` under its claim, or say why not.

    ``token``: the ``recheck`` of an API token taken from the process's cache
    (``accounts.cached_token``), checked before anything is written or answered: by the call of a
    succeeded report, else alone first (``accounts.check_token``); ``accounts.TokenChanged`` when
    it changed, nothing written."""
    if report.outcome == "succeeded" and not announcements.may_announce(workspace.pk):
        answer = _succeeded_in_one_call(workspace, key, report, actor=actor, token=token)
        if answer is not None:
            return answer
    # The ORM's way checks the token first (again, when the call found an operation of another action).
    accounts.check_token(token)
    return _reported(workspace=workspace, key=key, report=report, actor=actor)


def _reported(*, workspace: Workspace, key: str, report: OutcomeReport, actor: str) -> Answer:
    """``report_outcome`` through the ORM, in one transaction (the paths the call leaves)."""
    operation = keyed(workspace, key).first()
    if operation is None:
        return no_such_operation()
    digest = report.digest()
    with transaction.atomic():
        # Lock order (docs/architecture.md): the claim's Attempt, then the row, then the tallies
        # and the chain (the move), as the sweep takes them when the lease expires.
        attempt = _attempt_of(operation, report.token)
        operation = locked(Operation.objects.filter(pk=operation.pk))
        if operation is None:  # purged since it was found
            return no_such_operation()
        if attempt is not None and attempt.report:
            return _repeated(operation, attempt, digest)
        answer = current_claim(operation, report.token, timezone.now())
        if answer is None:
            assert attempt is not None  # opened with the claim the token holds, in its transaction
            _record(operation, attempt, report, digest, actor=actor)
            return Answer(RECORDED, operation, f"recorded: the operation is {operation.state}")
    return stale_after(answer, actor=actor)


def _succeeded_in_one_call(
    workspace: Workspace, key: str, report: OutcomeReport, *, actor: str, token: dict | None
) -> Answer | None:
    """A succeeded report in one call and one commit (the call checking ``token``, when there is
    one); None when the call leaves it to ``_reported`` (the key names no action its caller
    performs, or an operation of another action)."""
    if storable_text_problem(key):  # no key holds it: ``_reported`` answers so, asking nothing
        return None
    action = registry.get(unquote(key.rpartition(":")[2]))  # a key ends with its action (ledger.keys)
    if action is None or not action.performed_by_caller:
        return None
    operation_id, claim = claim_in(report.token) or (None, None)
    now = timezone.now()
    request = {
        "workspace_id": workspace.pk,
        "key": key,
        "action": action.name,
        "operation_id": operation_id,
        "claim": claim,
        "digest": report.digest(),
        "now": now,
        "result": report.result or {},
        "external_id": report.external_id or "",
        "tally": tallies.success_labels(action.name),
        "shard": tallies.shard(),
        "audit": audit_chain.event_row(workspace.pk, actor) | {"created_at": now},
    }
    if token is not None:
        request["token"] = token
    result = contention.retried(_call, dumps(request), doing="reporting an outcome")
    status = result["answer"]
    if status == "other_action":
        return None
    if status == "not_found":
        return no_such_operation()
    operation = from_json(Operation, result["operation"], workspace=workspace)
    if status == "recorded":
        attempt = from_json(Attempt, result["attempt"], operation=operation)
        log_transition(
            operation, from_state=State.PROCESSING, to_state=State.SUCCEEDED, kind="succeeded", attempt=attempt
        )
        return Answer(RECORDED, operation, f"recorded: the operation is {operation.state}")
    if status in ("repeated", "conflict"):
        return _repeated(operation, from_json(Attempt, result["attempt"], operation=operation), report.digest())
    # never_issued, stale, overdue: worded (and an overdue one moved) as the ORM's way does it.
    answer = current_claim(operation, report.token, now)
    assert answer is not None, status  # the call found the claim over
    return stale_after(answer, actor=actor)


def _call(request: str) -> dict:
    """One transaction: the call, then its audit event sealed and inserted with the COMMIT
    (``audit_chain.in_one_transaction``)."""
    with accounts.token_checked():
        return audit_chain.in_one_transaction(
            CALL, [request], lambda result: audit_chain.sealed(*result["audit"]) if result.get("audit") else None
        )


def _attempt_of(operation: Operation, token: str) -> Attempt | None:
    claim = claim_of(token, operation)
    if claim is None:
        return None
    # Its row alone (of self, no ordering through the operation): a join would lock the operation's
    # row too, and in whichever order the plan reads them, against the lock order above.
    return (
        Attempt.objects.select_for_update(of=("self",))
        .filter(operation=operation, fencing_token=claim)
        .order_by("pk")
        .first()
    )


def _repeated(operation: Operation, attempt: Attempt, digest: str) -> Answer:
    if attempt.report == digest:
        return Answer(RECORDED, operation, f"already recorded: the operation is {operation.state}")
    return Answer(
        OUTCOME_CONFLICT,
        operation,
        f"claim {attempt.fencing_token} already reported a different outcome ({attempt.outcome}): nothing changed",
    )


def _record(operation: Operation, attempt: Attempt, report: OutcomeReport, digest: str, *, actor: str) -> None:
    attempt.report = digest
    if report.outcome == "succeeded":
        attempt.external_id = report.external_id or ""
        finish_attempt(attempt, Attempt.Outcome.OK, counted=False)
        success = Success(result=report.result or {}, external_id=report.external_id or "")
        record_success(operation, success, attempt=attempt, worker=actor, token=operation.fencing_token)
        return
    error = privacy.scrub_failure(report.error_of(), operation, get_action(operation.action))
    finish_attempt(attempt, error.category, error, counted=False)
    write_failure(
        operation, get_action(operation.action), error, attempt=attempt, worker=actor, token=operation.fencing_token
    )
