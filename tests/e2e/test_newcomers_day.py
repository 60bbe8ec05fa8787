"""The newcomer's day, cleared: `make demo-day`'s two steps (demo_setup, then demo_day through the
real intake, with a real qcluster calling a real stand-in told to fail), then an operator and an
approver who clear Needs attention through the console alone, in Chromium: replay by failure group,
mark succeeded with the record found, look up, dismiss conflicts, approve. Nothing they do after the
day fails for a reason the day scripted: the day drops the faults it did not use."""

import io
import os
import re
import shutil
import time
from collections import Counter

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from ledger.actions.base import get_action
from ledger.engine import lookups
from ledger.models import Attempt, Conflict, Operation
from ledger.states import ATTENTION_STATES, State
from opsconsole.management.commands.demo_setup import DEMO_PASSWORD
from tests.e2e.conftest import SHOTS, screenshot
from tests.faults.qcluster import cluster_pool, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

EVENTS = 300
DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "console")
WORKING = (State.PENDING, State.PROCESSING, State.RETRYING)


def log_in_as(page, username: str) -> None:
    page.context.clear_cookies()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()


def attention() -> Counter:
    return Counter(Operation.objects.filter(state__in=ATTENTION_STATES).values_list("state", flat=True))


def keep(name: str) -> None:
    """The screenshot ``name`` (just taken) into docs/console/, where the docs show it."""
    shutil.copy(os.path.join(SHOTS, f"{name}.png"), os.path.join(DOCS, f"{name}.png"))


@pytest.fixture
def day(standin, live_server, tmp_path):
    """`make demo-day` at 300 events: the demo set up, a cluster at work, the day played."""
    url = live_server.url + "/"
    call_command("demo_setup", url=url, stdout=io.StringIO())
    with cluster_pool(tmp_path) as start:
        cluster = start(
            "day", env={"OPSCONSOLE_STANDIN_URL": standin.url, "OPSCONSOLE_HTTP_TIMEOUT_SECONDS": "2", "Q_WORKERS": "2"}
        )
        out = io.StringIO()
        call_command("demo_day", events=EVENTS, batch=50, wait=120, url=url, stdout=out)
        yield cluster, out.getvalue()


def worked(cluster, why: str) -> None:
    """Until the cluster has done what the people's decisions gave it (a caller's own claim aside)."""
    wait_for(
        lambda: not Operation.objects.filter(state__in=WORKING).exclude(action="send-invoice").exists(),
        timeout=120,
        message=why,
        clusters=(cluster,),
        describe=lambda: str(Counter(Operation.objects.values_list("state", flat=True))),
    )


def late_requests_settled() -> None:
    """Until no request of the day's tries can still land at the destination (``settle_after`` past
    each last try): before that, the destination's "no record" proves nothing, and a replay or a
    lookup is rightly refused. The operator starts after a coffee."""
    settled = [
        lookups.settles_at(op, get_action(op.action)) for op in Operation.objects.filter(state__in=ATTENTION_STATES)
    ]
    last = max((when for when in settled if when), default=None)
    if last and last > timezone.now():
        time.sleep((last - timezone.now()).total_seconds() + 0.5)


def test_an_operator_and_an_approver_clear_the_day_through_the_console(page, day, standin):
    cluster, printed = day
    assert re.search(r"dropped \d+ faults the day did not use", printed), printed
    assert standin.http.get("/_faults/count").json()["create"] == 0
    day_ended = timezone.now()
    after_the_day = attention()
    assert after_the_day[State.NEEDS_REVIEW], after_the_day
    assert after_the_day[State.PENDING_APPROVAL], after_the_day

    log_in_as(page, "operator")
    expect(page.get_by_role("heading", level=1)).to_have_text("Needs attention")
    screenshot(page, "day-needs-attention")
    keep("day-needs-attention")
    page.get_by_role("link", name="Dashboard").click()
    expect(page.locator("#destinations")).to_contain_text("stand-in")
    screenshot(page, "day-dashboard")
    keep("day-dashboard")
    page.goto("/console/")

    # 1. Unknown outcomes, first thing: where the operator finds the record at the destination, they
    # mark the operation succeeded with it; the rest they have looked up (an "absent" while a late
    # request may still land is not believed: the page says when it asks again, and reconciliation
    # does, by itself).
    marked = looked_up = 0
    for op in Operation.objects.filter(state=State.UNKNOWN).order_by("pk"):
        page.goto(f"/console/operations/{op.pk}/")
        records = standin.records(reference=op.key) or standin.records(idempotency_key=op.key)
        if len(records) == 1 and not marked:
            page.get_by_label("Destination record id").fill(records[0]["id"])
            page.get_by_label("How you checked").fill("found it in the destination's records list")
            with page.expect_navigation():
                page.get_by_role("button", name="Mark succeeded").click()
            expect(page.get_by_role("status").first).to_contain_text("succeeded")
            marked += 1
            continue
        look_up = page.get_by_role("button", name="Look up now")
        if not look_up.count():  # reconciliation settled it meanwhile
            op.refresh_from_db()
            assert op.state != State.UNKNOWN, page.locator("main").inner_text()
            continue
        with page.expect_navigation():
            look_up.click()
        screenshot(page, "day-looked-up")
        looked_up += 1
    assert marked + looked_up >= 1, f"the day left no unknown outcome to work: {after_the_day}"

    # 2. After a coffee (no request of the day can still land), every failure group replayed at
    # once, with one reason: the destination was fixed.
    late_requests_settled()
    page.goto("/console/")
    page.get_by_role("link", name="Failure groups").first.click()
    screenshot(page, "day-failures")
    keep("day-failures")
    groups = page.locator("table.failure-groups tbody tr")
    replayed_groups = 0
    while groups.count():
        group = groups.first
        group.get_by_text(re.compile(r"^Replay or cancel all \d+$")).click()
        group.get_by_label("Reason").fill("the destination's owner fixed the records the day broke")
        with page.expect_navigation():
            group.get_by_role("button", name=re.compile(r"^Replay all \d+$")).click()
        # Finished (N/N done) before the next group: the cluster runs the bulk action after the press.
        expect(page.locator("#bulk-progress")).to_contain_text(re.compile(r"\b(\d+)/\1 done"), timeout=60_000)
        expect(page.locator("#bulk-progress")).to_contain_text(" replayed, 0 skipped")
        replayed_groups += 1
        page.goto("/console/failures/")
    assert replayed_groups >= 2
    screenshot(page, "day-bulk-replayed")
    worked(cluster, "the replays to run")
    assert not Operation.objects.filter(state=State.NEEDS_REVIEW).exists(), attention()
    # What is still unknown, looked up again: now the destination's answer is believed (found:
    # succeeded; absent: sent again under the same key).
    for pk in Operation.objects.filter(state=State.UNKNOWN).exclude(action="send-invoice").values_list("pk", flat=True):
        page.goto(f"/console/operations/{pk}/")
        look_up = page.get_by_role("button", name="Look up now")
        if not look_up.count():  # reconciliation settled it meanwhile
            assert Operation.objects.get(pk=pk).state != State.UNKNOWN, page.locator("main").inner_text()
            continue
        with page.expect_navigation():
            look_up.click()
        # Reconciliation may settle it between the page and the press: then the page says so.
        said = page.get_by_role("status").or_(page.get_by_role("alert")).first
        expect(said).to_contain_text(re.compile("record|sent again|is no longer unknown; nothing was asked"))
        if "no longer unknown" in said.inner_text():
            assert Operation.objects.get(pk=pk).state != State.UNKNOWN
    worked(cluster, "the looked-up operations to be sent again")
    assert not Operation.objects.filter(state=State.UNKNOWN).exclude(action="send-invoice").exists(), attention()

    # 3. Conflicts: the redeliveries that changed a field after the operation ran are dismissed,
    # one action's all at once; the held ones with a refund's amount go to the approver.
    page.goto("/console/conflicts/")
    screenshot(page, "day-conflicts")
    while (bulk := page.get_by_role("form", name=re.compile(r"^Dismiss all \d+ matching conflicts of "))).count():
        form = bulk.first
        form.get_by_label("Reason").fill("a redelivery after the operation ran: the recorded payload stands")
        with page.expect_navigation():
            form.get_by_role("button", name=re.compile(r"^Dismiss all \d+ matching$")).click()
        expect(page.get_by_role("alert")).to_have_count(0)
    held = Conflict.objects.filter(status=Conflict.Status.OPEN)
    for conflict in held:
        row = page.locator(f"#conflict-{conflict.pk}")
        if row.get_by_role("button", name="Assign").count():
            row.get_by_role("button", name="Assign").click()

    # 4. The approver: the held refunds' conflicts (amounts shown as money), then every refund at once.
    log_in_as(page, "approver")
    page.goto("/console/conflicts/")
    for conflict in Conflict.objects.filter(status=Conflict.Status.OPEN):
        row = page.locator(f"#conflict-{conflict.pk}")
        expect(row).to_contain_text("EUR")
        row.get_by_label("Reason").fill("the amount first sent is the one agreed with the customer")
        with page.expect_navigation():
            row.get_by_role("button", name=re.compile(r"^Dismiss")).click()
    assert not Conflict.objects.filter(status=Conflict.Status.OPEN).exists()
    page.get_by_role("link", name="Approvals", exact=True).click()
    screenshot(page, "day-approvals")
    page.get_by_role("checkbox", name="Select all on this page").check()
    page.get_by_role("button", name="Approve selected…").click()
    page.get_by_label("Note").fill("refunds checked against the day's tickets")
    page.get_by_role("button", name="Confirm", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Approved")).to_contain_text("Approved")
    worked(cluster, "the approved refunds to run")

    # Cleared: nothing needs attention but the caller's own claim of INV-1, which its caller holds.
    left = Operation.objects.filter(state__in=ATTENTION_STATES).exclude(action="send-invoice")
    assert not left.exists(), [(op.key, op.state, op.last_error_message) for op in left]
    failed = Attempt.objects.filter(started_at__gte=day_ended).exclude(outcome=Attempt.Outcome.OK)
    assert not failed.exists(), [(a.operation.key, a.outcome, a.error_message) for a in failed]
    log_in_as(page, "operator")
    page.goto(f"/console/?state={State.NEEDS_REVIEW}")
    expect(page.locator("a[data-state=needs_review] .tab-count")).to_have_text("0")
    screenshot(page, "day-cleared")
    keep("day-cleared")
