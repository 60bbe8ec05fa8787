"""An action its caller performs may still be written in Python (``performed_by = CALLER`` on an
``ActionDefinition``): claimed, reported, expired to unknown and found by its own ``lookup`` as a
configured one is. None is in ledger/actions any more, so this test-only one keeps the path tested."""

from datetime import timedelta

import pytest
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from ledger.actions import base
from ledger.actions.base import CALLER, ActionDefinition
from ledger.models import Operation
from ledger.outcomes import Absent, Found
from reconciliation.reconcile import reconcile_operation

NAME = "test-coded-caller"


class PostcardData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: StrictStr
    version: StrictInt


class SendPostcard(ActionDefinition):
    """Its caller mails the postcard; the printer's records (here a dict: the destination boundary)
    are what its lookup asks."""

    name = NAME
    schema = PostcardData
    fingerprint_fields = ("request_id", "version")
    external = True
    performed_by = CALLER
    claim_lease = timedelta(seconds=30)
    service_level = timedelta(minutes=10)
    printed: dict[str, str] = {}

    def lookup(self, operation):
        record = self.printed.get(operation.key)
        return Found(external_id=record, result={"record_id": record}) if record else Absent()


@pytest.fixture
def postcard():
    SendPostcard.printed = {}
    base.register(SendPostcard)
    yield base.registry[NAME]
    base.registry.coded.pop(NAME, None)


def claim(api, request_id="P-1"):
    return api.post("/api/v1/claims", {"action": NAME, "data": {"request_id": request_id, "version": 1}})


def test_a_coded_caller_action_is_claimed_with_its_lease_and_its_report_recorded(api, postcard):
    before = timezone.now()
    answer = claim(api).json()

    assert answer["status"] == "claimed"
    operation = Operation.objects.get()
    assert before + timedelta(seconds=29) < operation.lease_expires_at <= timezone.now() + timedelta(seconds=30)
    reported = api.post(
        f"/api/v1/claims/{answer['key']}/outcome",
        {"token": answer["token"], "outcome": "succeeded", "external_id": "pc-1"},
    )
    assert reported.status_code == 200, reported.json()
    assert Operation.objects.get().state == "succeeded"


def test_an_expired_claim_of_a_coded_caller_action_is_found_by_its_own_lookup(api, postcard):
    answer = claim(api).json()
    Operation.objects.filter(key=answer["key"]).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert claim(api).json()["status"] == "unknown"
    postcard.printed[answer["key"]] = "pc-9"

    assert reconcile_operation(Operation.objects.get(), asked_by_person=True) == "found"
    assert Operation.objects.get().external_id == "pc-9"


def test_a_coded_caller_action_that_performs_itself_is_refused():
    class Both(SendPostcard):
        name = "test-coded-both"

        def perform(self, operation):
            raise AssertionError("never called")

    with pytest.raises(ValueError, match="is performed by the caller: it declares no perform"):
        base.register(Both)
    assert "test-coded-both" not in base.registry.coded


def test_the_claims_document_publishes_a_coded_caller_actions_envelope(postcard):
    from opsconsole.api.endpoints import _event_schema

    schema, components = _event_schema(claims=True)

    assert "TestCodedCallerClaim" in components
    assert schema["discriminator"]["propertyName"] == "action"
