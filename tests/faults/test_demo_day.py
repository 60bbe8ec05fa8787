"""`make demo-day` at a small scale: the day's events through the real intake, a real qcluster
calling a real stand-in destination told to fail, and the operations ending in the states a
person then works: succeeded, needing review after a definite 4xx, unknown after a hang-up or a
timeout, awaiting approval; the output shows the progress and then what to look at."""

import io
import re

import pytest
from django.core.management import CommandError, call_command

from ledger.models import AuditEvent, Operation
from ledger.states import State

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_small_day_ends_in_varied_states_with_progress_and_what_to_look_at(workspace, standin, start_cluster):
    start_cluster(
        "day", env={"OPSCONSOLE_STANDIN_URL": standin.url, "OPSCONSOLE_HTTP_TIMEOUT_SECONDS": "2", "Q_WORKERS": "4"}
    )
    out = io.StringIO()

    call_command("demo_day", events=240, batch=20, wait=90, url="http://console.test/", stdout=out)

    printed = out.getvalue()
    progress = re.findall(r"^  (\d+)/240 events in: ", printed, re.MULTILINE)
    assert 5 <= len(progress) <= 11
    assert progress[-1] == "240"  # progress, not a line per event
    assert "the cluster at work: " in printed
    assert len(printed.splitlines()) < 60
    for answer in ("accepted", "duplicate", "payload_conflict", "invalid_input"):
        assert re.search(rf"answers: .*\b\d+ {answer}\b", printed), answer
    for link in ("console/failures/", "console/conflicts/", "console/?state=pending_approval", "console/audit/"):
        assert f"http://console.test/{link}" in printed, link

    states = set(Operation.objects.values_list("state", flat=True))
    assert {State.SUCCEEDED, State.NEEDS_REVIEW, State.PENDING_APPROVAL} <= states, states
    assert not states & {State.PENDING, State.PROCESSING}, states  # the cluster worked through the day
    # A definite refusal of the stand-in sent an operation to review; a hang-up or a slow answer was
    # met as ambiguous; a 5xx was retried.
    refused = Operation.objects.filter(state=State.NEEDS_REVIEW, last_error_category="permanent")
    assert {re.search(r"HTTP (4\d\d)", op.last_error_message)[1] for op in refused}, "no 4xx refusal"
    # ... in the stand-in's own words: its code is kept in brackets, for failure groups to split by.
    assert all(re.search(r"HTTP 4\d\d from \S+ \[[a-z_]+\]: ", op.last_error_message) for op in refused)
    # An ambiguous try became unknown where the destination does not deduplicate (send-notice; then
    # reconciliation may have settled it), and was retried with the same key where it does
    # (file-ticket). Which call draws a hang-up depends on the cluster's four workers, so a day this
    # small may meet only one of the two; each is asserted on its own in tests/ledger/engine/test_processing.py.
    ambiguous = AuditEvent.objects.filter(error_category="ambiguous")
    assert ambiguous.filter(kind__in=["outcome_unknown", "retry_scheduled"]).exists()
    assert all(
        event.kind == "outcome_unknown" or "retry with same key" in event.message
        for event in ambiguous.filter(kind__in=["outcome_unknown", "retry_scheduled"])
    )
    assert AuditEvent.objects.filter(kind="retry_scheduled").exists()
    example = re.search(r"One to review: +http://console.test/console/operations/(\d+)/", printed)
    assert Operation.objects.get(pk=example[1]).state == State.NEEDS_REVIEW
    # The faults the day did not use are gone, and the output says how many: what a person does
    # after the day meets no scripted failure.
    dropped = re.search(r"dropped (\d+) faults the day did not use \((\d+) for calls, (\d+) for lookups\)", printed)
    assert dropped, printed
    assert int(dropped[1]) == int(dropped[2]) + int(dropped[3])
    assert standin.http.get("/_faults/count").json() == {"create": 0, "lookup": 0}
    assert printed.rstrip().splitlines()[-1].startswith("  One to ")  # what to look at, last


def test_the_day_scripts_a_fault_for_each_call_it_expects_and_its_retries():
    """One create fault per first call of a new valid operation the day makes (not a redelivery, an
    invalid event or a refund), and one more per fault that is retried."""
    import random

    from ledger.management.commands.demo_day import PASS, _retried, expected_calls, plan_day, plan_faults

    day = plan_day(400, tag="t", rng=random.Random(27))
    calls = expected_calls(day)
    new_external = {
        (e["action"], e["data"].get("request_id") or e["data"].get("email"))
        for e in day
        if e["action"] in ("file-ticket", "send-notice", "send-welcome")
    }
    assert 0 < calls <= len(new_external)
    assert calls < sum(e["action"] in ("file-ticket", "send-notice", "send-welcome", "issue-refund") for e in day)

    faults = plan_faults(calls, rng=random.Random(1), timeout_seconds=2)

    creates = [fault for fault in faults if fault.get("on") != "lookup"]
    assert len(creates) == calls + sum(_retried(fault) for fault in creates)
    assert sum(fault == PASS for fault in creates) > len(creates) / 2


def test_the_summary_file_gets_what_to_look_at_on_top(workspace, standin, tmp_path):
    """`make demo-day` passes --summary: the links go to the top of the file demo_setup wrote (its
    token stays last), not to standard output."""
    summary = tmp_path / "summary.txt"
    summary.write_text("API token for workspace demo: oc_x\n")
    out = io.StringIO()

    call_command("demo_day", events=5, wait=0, url="http://console.test/", summary=str(summary), stdout=out)

    written = summary.read_text().splitlines()
    assert written[0].startswith("What to look at")
    assert written[-1] == "API token for workspace demo: oc_x"
    assert "What to look at" not in out.getvalue()
    assert "faults the day did not use" in out.getvalue()


def test_without_the_workspace_it_says_to_set_the_demo_up_first(db):
    with pytest.raises(CommandError, match="No workspace 'demo': run demo_setup first"):
        call_command("demo_day", events=10, stdout=io.StringIO())


def test_without_a_stand_in_it_says_so_and_submits_nothing(workspace, settings):
    settings.OPSCONSOLE_STANDIN_URL = "http://127.0.0.1:1"

    with pytest.raises(CommandError, match="did not take the faults .*is it running"):
        call_command("demo_day", events=10, stdout=io.StringIO())
    assert not Operation.objects.exists()


@pytest.mark.parametrize("option", [{"events": 0}, {"batch": 0}])
def test_it_refuses_an_empty_day(workspace, option):
    with pytest.raises(CommandError, match="must be at least 1"):
        call_command("demo_day", **({"events": 10} | option), stdout=io.StringIO())
