"""How an action's effect ended. Actions return ``Success`` or raise one of the errors below;
``ledger.engine.failed`` turns each into a state (docs/design.md rule 6 for the ambiguous case)."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Success:
    result: dict = field(default_factory=dict)
    external_id: str = ""


@dataclass(frozen=True)
class Answer:
    """What a destination said when it refused or failed a call: its status, a few headers worth
    keeping (``ledger.actions.http.KEPT_HEADERS``), its body up to a bound, and its own error code
    and words where the body holds them. Kept on the try's Attempt row, with the action's sensitive
    values and the destination's secret masked first (``ledger.core.privacy.scrub_failure``)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    code: str = ""
    said: str = ""


class OutcomeError(Exception):
    """Base of the classified failures. ``message`` must not contain payload text beyond what the
    destination said (masked before it is stored); ``answer``, when the destination answered."""

    category = ""

    def __init__(self, message: str, *, http_status: int | None = None, answer: Answer | None = None):
        super().__init__(message)
        self.message = message
        self.answer = answer
        self.http_status = answer.status if answer is not None and http_status is None else http_status


class TransientError(OutcomeError):
    """May improve with time (rate limit, 5xx, refused connection): retry with backoff."""

    category = "transient"

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        http_status: int | None = None,
        answer: Answer | None = None,
    ):
        super().__init__(message, http_status=http_status, answer=answer)
        self.retry_after = retry_after


class PermanentError(OutcomeError):
    """Will not improve by repeating (invalid request, forbidden): a person must look."""

    category = "permanent"


class AmbiguousError(OutcomeError):
    """The request may have reached the destination (timeout, reset after sending)."""

    category = "ambiguous"


# What reconciliation learns when it asks the destination about an operation whose outcome is unknown.


@dataclass(frozen=True)
class Found:
    """The destination has the record: the operation succeeded."""

    external_id: str
    result: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Absent:
    """The destination confirms it has no such record: trying again is safe."""


@dataclass(frozen=True)
class CannotTell:
    """The destination could not answer. Asking again later may help (it was down, it timed
    out), unless ``final``: no lookup exists, or several records carry our key; a person must look."""

    reason: str
    final: bool = False
