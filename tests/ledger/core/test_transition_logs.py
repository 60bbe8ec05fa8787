"""Each state transition's log line carries the attempt count, the correlation id and the
configuration version (never payload text)."""

import logging

from ledger.core import configuration
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Attempt
from ledger.people import cancellations
from tests.conftest import R42


def transitions(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == "transition"]


def test_a_transition_after_an_attempt_names_its_configuration_attempts_and_correlation_id(workspace, caplog):
    caplog.set_level(logging.INFO, logger="ledger")
    submit_event(
        workspace=workspace, source="api", raw={"action": "prepare-brief", "correlation_id": "corr-7", "data": R42}
    )

    process_due_operations()

    [succeeded] = [record for record in transitions(caplog) if record.to == "succeeded"]
    attempt = Attempt.objects.get()
    assert (succeeded.attempts, succeeded.correlation_id) == (1, "corr-7")
    assert succeeded.config_version == attempt.config_version_id[:12]
    assert "Review renewal options" not in str(vars(succeeded))


def test_a_transition_without_an_attempt_names_the_configuration_it_would_run_under(workspace, caplog, alice):
    result = submit_event(workspace=workspace, source="api", raw={"action": "prepare-brief", "data": R42})
    caplog.set_level(logging.INFO, logger="ledger")

    cancellations.cancel_operation(result.operation, user=alice, reason="not needed")

    [cancelled] = transitions(caplog)
    assert (cancelled.kind, cancelled.attempts, cancelled.correlation_id) == ("cancelled", 0, "")
    assert cancelled.config_version == configuration.current_digest(result.operation)[:12]
    assert len(cancelled.config_version) == 12
