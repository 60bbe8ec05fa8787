"""A request the API refuses, as one exception: raised wherever the refusal is found (reading the
body, decoding it, a route's own checks) and answered by the API's one handler
(``opsconsole.api.endpoints.answer_problem``), so a route reads as what it does when all is well."""

from opsconsole.api.answers import Answer


class ApiProblem(Exception):
    """Refused with ``status``. With ``answer``, answered with that body and recorded nowhere (no
    such operation or source, a batch refused whole, a source that cannot check signatures yet).
    Without it, an arrival refused: recorded as a blocked delivery (an unverified hook's arrival is
    counted instead, ``ledger.intake.refusals``) and answered as intake answers it, with ``reason``
    and ``errors`` (one error: ``field`` and ``message``) and, for a body too large, ``extra``."""

    def __init__(
        self,
        status: int,
        *,
        answer: Answer | None = None,
        reason: str = "",
        field: str = "body",
        message: str = "",
        errors: list[dict] | None = None,
        extra: dict | None = None,
        headers: dict | None = None,
    ):
        super().__init__(reason or type(answer).__name__)
        self.status = status
        self.answer = answer
        self.reason = reason
        self.errors = errors or [{"field": field, "message": message}]
        self.extra = extra
        self.headers = headers
