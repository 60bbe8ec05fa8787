"""A client of opsconsole's claims API: claim an operation, act only when told, report the outcome.

    from opsconsole_claims import Ledger

    ledger = Ledger("http://127.0.0.1:8000", token="...")
    with ledger.claim("send-invoice", data, lease_seconds=60) as claim:
        if claim.should_act:
            invoice = vendor.create(..., idempotency_key=claim.idempotency_key)
            claim.succeeded(external_id=invoice.id, result={"number": invoice.number})

The same `Ledger` calls the rest of the API a flow uses, one method per route returning the answer's
body: ``ledger.due()``, ``ledger.claim_by_key(key)``, ``ledger.submit_event(...)``,
``ledger.operations(...)``, ``ledger.approve(key, fingerprint=...)``, ``ledger.pause(...)`` ...
(opsconsole_claims.management; the routes in opsconsole_claims.routes).

See README.md beside this package for every answer and what the client does with it.
"""

from opsconsole_claims.claim import Claim
from opsconsole_claims.errors import Ambiguous, ClaimError, ClaimLost, Permanent, Refused, ServiceUnavailable
from opsconsole_claims.ledger import Ledger

__all__ = ["Ambiguous", "Claim", "ClaimError", "ClaimLost", "Ledger", "Permanent", "Refused", "ServiceUnavailable"]
