"""A claim's token, as its caller holds it: the operation and the claim's fencing token, signed, so
that no caller can make up the token of a claim it was not given (a rejected duplicate cannot
touch the holder's lease or report in its name)."""

from django.core import signing

from ledger.models import Operation

_SIGNER = signing.Signer(salt="ledger.callers.claim")


def token_for(operation: Operation) -> str:
    """The token of the claim ``operation`` is held by now."""
    return _SIGNER.sign(f"{operation.pk}.{operation.fencing_token}")


def claim_of(token: str, operation: Operation) -> int | None:
    """The fencing token ``token`` was issued under for ``operation``; None when it was issued for
    another operation or never issued here."""
    named = claim_in(token)
    if named is None or named[0] != operation.pk:
        return None
    return named[1]


def claim_in(token: str) -> tuple[int, int] | None:
    """The operation's id and the fencing token ``token`` was issued under; None when it was never
    issued here (SQL that fences a report is given these: ``ledger_report_outcome``)."""
    try:
        operation_id, _, fencing_token = _SIGNER.unsign(token).partition(".")
    except signing.BadSignature:
        return None
    if not (operation_id + fencing_token).isascii() or not operation_id.isdigit() or not fencing_token.isdigit():
        return None
    return int(operation_id), int(fencing_token)
