"""`make demo-day`: a newcomer's day against a failing destination, played through the real intake.

The events go in as a sender's batches do (``submit.submit_batch``); the running qcluster does the
calls to the stand-in destination (standin/), which is told beforehand, through its fault controls
(``POST /_faults``), how to fail: transient 5xx, definite 4xx of several kinds, hang-ups before and
after acting, answers slower than our timeout, lookups that fail. The day also holds redeliveries,
conflicting ones, older versions after newer ones, invalid events and refunds that wait for an
approver. When the cluster has worked the day, the faults the day did not use are dropped
(``POST /_faults/clear``), so what a person does afterwards fails only for reasons of its own. It
prints its progress, then what to look at.
"""

import logging
import random
import time
from collections import Counter
from itertools import islice
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, Q
from django.utils import timezone

from ledger.intake import submit
from ledger.models import Delivery, Operation, Workspace
from ledger.states import State

# The share of each kind of event in a day (of --events). External actions call the stand-in.
MIX = {
    "brief": 28,  # prepare-brief: internal, a draft for review
    "status": 8,  # update-status: latest wins; some arrive after a newer version (stale)
    "ticket": 28,  # file-ticket: external, our idempotency key honoured
    "notice": 10,  # send-notice: external, no idempotency key (lookups by reference)
    "welcome": 5,  # send-welcome: external, a sensitive identity (an email address)
    "refund": 4,  # issue-refund: external, consequential: waits for an approver
    "redelivery": 9,  # an earlier event sent again: a duplicate
    "conflict": 4,  # an earlier event sent again with a changed field: a conflict
    "invalid": 4,  # an event the schema refuses
}
EXTERNAL = {"ticket": "file-ticket", "notice": "send-notice", "welcome": "send-welcome", "refund": "issue-refund"}
# The external actions the day calls without a person (issue-refund waits for an approver).
CALLED_BY_THE_DAY = ("file-ticket", "send-notice", "send-welcome")
# What the stand-in does to each create call, by share (the rest succeed). Each try of an external
# operation takes the next fault in line, retries included.
FAULTS = [
    (10, {"kind": "status", "status": 503, "retry_after": 1}),  # transient: retried
    (3, {"kind": "status", "status": 500}),  # transient: retried
    # Definite refusals, each with the destination's own code and words (failure groups split by the
    # code): needs review.
    (1, {"kind": "status", "status": 400, "error": "owner_unknown", "detail": "no such owner in this tenant"}),
    (1, {"kind": "status", "status": 400, "error": "summary_too_long", "detail": "summary over 80 characters"}),
    (1, {"kind": "status", "status": 404, "error": "request_not_found", "detail": "the request was deleted"}),
    (1, {"kind": "status", "status": 409, "error": "request_archived", "detail": "the request is archived"}),
    (1, {"kind": "status", "status": 422, "error": "invalid_version", "detail": "version out of range"}),
    (2, {"kind": "reset_before"}),  # hung up before acting: unknown until looked up (absent)
    (2, {"kind": "drop_after_commit"}),  # hung up after acting: unknown until looked up (found)
    (1, "timeout"),  # answered after our timeout, having acted: unknown
]
PASS = {"kind": "delay", "seconds": 0}  # the stand-in's no-op: handled as usual
# One lookup in this many fails with a 503 (reconciliation then asks again later).
LOOKUP_FAILURE_EVERY = 3
PROGRESS_STEPS = 10  # progress lines while submitting
# At most this long for the calls due before the day (demo_setup's) before its faults are queued.
EARLIER_CALLS_WAIT_SECONDS = 15
WAITING_STATES = (State.PENDING, State.PROCESSING, State.RETRYING)
# An operation of each state a person acts on, to open first.
EXAMPLES = {State.NEEDS_REVIEW: "One to review", State.UNKNOWN: "One unknown", State.PENDING_APPROVAL: "One to approve"}


def plan_day(count: int, *, tag: str, rng: random.Random) -> list[dict]:
    """``count`` events of the day, in arrival order (pure: the same seed, the same day)."""
    kinds, weights = zip(*MIX.items(), strict=True)
    events: list[dict] = []
    for index in range(count):
        kind = rng.choices(kinds, weights)[0]
        earlier = [event for event in events if event["action"] != "update-status" and "version" in event["data"]]
        if kind in ("redelivery", "conflict") and earlier:
            event = rng.choice(earlier)
            data = dict(event["data"])
            if kind == "conflict":
                field = next(name for name in ("summary", "title", "language", "amount_cents") if name in data)
                data[field] = (
                    data[field] + 1 if field == "amount_cents" else ("fr" if field == "language" else "Changed")
                )
            events.append({"action": event["action"], "delivery_id": f"{tag}-d{index}", "data": data})
            continue
        events.append(_new_event(kind, index, tag, rng, events))
    return events


def _new_event(kind: str, index: int, tag: str, rng: random.Random, events: list[dict]) -> dict:
    request = f"{tag}-{index}"
    if kind == "status":
        newer = next((e for e in reversed(events) if e["action"] == "update-status" and e["data"]["version"] > 1), None)
        if newer is not None and rng.random() < 0.3:  # version 1 after version 2: answered stale
            data = {"request_id": newer["data"]["request_id"], "version": 1, "status": "received"}
        else:
            data = {"request_id": request, "version": rng.choice([1, 2]), "status": rng.choice(["in_review", "closed"])}
        return {"action": "update-status", "delivery_id": f"{tag}-d{index}", "data": data}
    data: dict = {"request_id": request, "version": 1}
    action = EXTERNAL.get(kind, "prepare-brief")
    if kind == "brief":
        data |= {"title": f"Review request {request}", "owner": "ops"}
    elif kind in ("ticket", "notice"):
        data |= {"summary": f"Follow up {request}", "owner": "ops"}
    elif kind == "welcome":
        data = {"email": f"newcomer-{tag}-{index}@example.com", "version": 1, "language": "en"}
    elif kind == "refund":
        data |= {"customer_id": f"C-{1000 + index}", "amount_cents": rng.randrange(500, 20000, 50), "currency": "EUR"}
    elif kind == "invalid":  # a version that is not a number, or an owner the workspace has not approved
        action = rng.choice(["prepare-brief", "file-ticket"])
        field = "title" if action == "prepare-brief" else "summary"
        data |= {field: "Broken", "owner": "ops"} | rng.choice([{"version": "one"}, {"owner": "nobody"}])
    return {"action": action, "delivery_id": f"{tag}-d{index}", "data": data}


def expected_calls(day: list[dict]) -> int:
    """The first calls the day's events make: one per new valid operation of an action the day calls
    (a redelivery is a duplicate or a conflict, an invalid event is refused, a refund waits)."""
    operations = set()
    for event in day:
        data = event["data"]
        if event["action"] not in CALLED_BY_THE_DAY or data.get("owner") == "nobody":
            continue
        if not isinstance(data.get("version"), int):
            continue
        operations.add((event["action"], data.get("request_id") or data.get("email"), data["version"]))
    return len(operations)


def _retried(fault: dict) -> bool:
    """Whether a call meeting ``fault`` is tried again (a 5xx; an ambiguous one of file-ticket, with
    the same key: counted as retried too, as the day does not know which action meets it)."""
    return (fault["kind"] == "status" and fault["status"] >= 500) or fault["kind"] in (
        "reset_before",
        "drop_after_commit",
    )


def plan_faults(calls: int, *, rng: random.Random, timeout_seconds: float) -> list[dict]:
    """One create fault per call the day is expected to make, retries included, most of them the
    no-op; then the lookup faults. A fault list the stand-in takes."""
    faults: list[dict] = []
    remaining = calls
    while remaining > 0:
        fault = PASS
        roll = rng.random() * 100
        for share, candidate in FAULTS:
            if roll < share:
                fault = {"kind": "delay", "seconds": timeout_seconds + 1} if candidate == "timeout" else candidate
                break
            roll -= share
        faults.append(fault)
        remaining += _retried(fault) - 1
    lookups = [
        {"on": "lookup", "kind": "status", "status": 503},
        *[{"on": "lookup", **PASS}] * (LOOKUP_FAILURE_EVERY - 1),
    ]
    ambiguous = sum(fault["kind"] in ("reset_before", "drop_after_commit") for fault in faults)
    return faults + lookups * max(1, ambiguous // 2)


def _chunks(items: list, size: int):
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


class Command(BaseCommand):
    help = "Play a day of events (3,600 by default) against the stand-in destination with its faults on."

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=3600, help="How many events the day holds.")
        parser.add_argument("--workspace", default="demo")
        parser.add_argument("--batch", type=int, default=100, help="Events per batch, as a sender sends them.")
        parser.add_argument("--wait", type=float, default=180.0, help="Seconds to wait at most for the cluster.")
        parser.add_argument("--seed", type=int, default=27, help="The same seed plays the same day.")
        parser.add_argument("--url", default="http://127.0.0.1:8000/")
        parser.add_argument(
            "--summary", default="", help="Write what to look at at the top of this file, not on standard output."
        )

    def handle(self, *args, events, workspace, batch, wait, seed, url, summary, **options):
        # The cluster is woken as batches land; its "Enqueued" lines would bury the progress.
        logging.getLogger("django-q").setLevel(logging.WARNING)
        if events < 1 or batch < 1:
            raise CommandError("--events and --batch must be at least 1.")
        space = Workspace.objects.filter(slug=workspace).first()
        if space is None:
            raise CommandError(f"No workspace {workspace!r}: run demo_setup first (make demo-day does).")
        standin = settings.OPSCONSOLE_STANDIN_URL.rstrip("/")
        rng = random.Random(seed)
        tag = f"day{timezone.now():%m%d%H%M%S}"
        day = plan_day(events, tag=tag, rng=rng)
        faults = plan_faults(expected_calls(day), rng=rng, timeout_seconds=settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS)
        self._let_earlier_calls_go(space)
        self._queue_faults(standin, faults)
        creates = [fault for fault in faults if fault.get("on") != "lookup"]
        failing = sum(fault != PASS for fault in creates)
        self.stdout.write(
            f"A day of {events:,} events ({tag}); the stand-in at {standin} fails {failing:,} of its next "
            f"{len(creates):,} calls, and some lookups (the rest are dropped when the day is done)."
        )
        started = timezone.now()
        answers = self._submit(space, day, batch)
        todays = Operation.objects.filter(workspace=space, created_at__gte=started)
        self._wait(todays, wait)
        dropped = self._drop_unused_faults(standin)
        self._summary(todays, answers, standin, dropped)
        self._what_to_look_at(todays, url, summary)

    def _let_earlier_calls_go(self, space: Workspace) -> None:
        """Waits (bounded) for the calls due before the day (demo_setup's R-42 ticket) to be made:
        the day's faults are for the day's calls, not for one the cluster had not made yet."""
        due = Operation.objects.filter(
            Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=timezone.now()),
            workspace=space,
            action__in=EXTERNAL.values(),
            state__in=[State.PENDING, State.PROCESSING],
        )
        give_up_at = time.monotonic() + EARLIER_CALLS_WAIT_SECONDS
        while due.exists() and time.monotonic() < give_up_at:
            time.sleep(0.2)

    def _queue_faults(self, standin: str, faults: list[dict]) -> None:
        try:
            with httpx.Client(base_url=standin, timeout=10) as client:
                for chunk in _chunks(faults, 1000):
                    client.post("/_faults", json={"faults": chunk}).raise_for_status()
        except httpx.HTTPError as error:
            raise CommandError(
                f"The stand-in destination at {standin} did not take the faults ({error}): is it running "
                "(python -m standin --port 8765; make demo-day starts it)?"
            ) from None

    def _drop_unused_faults(self, standin: str) -> str:
        """Clears the faults the day queued and did not use: after the day, an approved refund, a
        replay or a lookup reaches a destination that fails only as a real one would."""
        try:
            dropped = httpx.post(f"{standin}/_faults/clear", timeout=5).json()["dropped"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return (
                f"did not clear its scripted faults: POST {standin}/_faults/clear before you work the day, "
                "or the next calls fail as scripted"
            )
        total = dropped["create"] + dropped["lookup"]
        return (
            f"dropped {total:,} faults the day did not use ({dropped['create']:,} for calls, "
            f"{dropped['lookup']:,} for lookups): what you do next meets no scripted failure"
        )

    def _submit(self, space: Workspace, day: list[dict], batch: int) -> Counter:
        answers: Counter = Counter()
        every = max(1, len(day) // PROGRESS_STEPS)
        done = 0
        for chunk in _chunks(day, batch):
            results = submit.submit_batch(
                workspace=space, raw_events=chunk, source=Delivery.Source.CLI, submitted_by="demo-day"
            )
            answers.update(result.reason or result.outcome for result in results)
            before, done = done, done + len(chunk)
            if done // every != before // every or done == len(day):
                said = ", ".join(f"{count:,} {answer}" for answer, count in answers.most_common())
                self.stdout.write(f"  {done:,}/{len(day):,} events in: {said}")
        return answers

    def _wait(self, operations, wait: float) -> None:
        """Until the cluster has worked everything it can (nothing pending, processing or retrying),
        or ``wait`` seconds: a line of the day's states every few seconds when they changed."""
        give_up_at, last = time.monotonic() + wait, None
        while True:
            states = self._states(operations)
            if states != last:
                self.stdout.write("  the cluster at work: " + ", ".join(f"{n:,} {s}" for s, n in states.most_common()))
                last = states
            if not any(states[state] for state in WAITING_STATES) or time.monotonic() >= give_up_at:
                break
            time.sleep(min(5.0, max(0.0, give_up_at - time.monotonic())))
        if any(states[state] for state in WAITING_STATES):
            self.stdout.write(
                f"  still working after {wait:g} s (retries wait out their backoff): the console shows the rest."
            )

    @staticmethod
    def _states(operations) -> Counter:
        return Counter(dict(operations.values_list("state").annotate(count=Count("id")).order_by()))

    def _summary(self, operations, answers: Counter, standin: str, dropped: str) -> None:
        states = self._states(operations)
        self.stdout.write("")
        self.stdout.write("The day, as it ended:")
        self.stdout.write("  answers:    " + ", ".join(f"{n:,} {a}" for a, n in answers.most_common()))
        self.stdout.write("  operations: " + ", ".join(f"{n:,} {s}" for s, n in states.most_common()))
        try:
            stats = httpx.get(f"{standin}/_stats", timeout=5).json()
            calls = stats["requests"].get("POST /records", 0)
            self.stdout.write(f"  stand-in:   {stats['records']:,} records from {calls:,} calls")
        except (httpx.HTTPError, ValueError, KeyError):
            self.stdout.write("  stand-in:   did not answer /_stats")
        self.stdout.write(f"              {dropped}")

    def _what_to_look_at(self, operations, url: str, summary: str) -> None:
        """The links to open first: on standard output, or (``--summary FILE``) written at the top of
        FILE, which `make demo-day` prints last, with the console's users and token (demo_setup's)."""
        console = f"{url}console/"
        lines = ["What to look at (users admin, operator, approver; password demo-password):"]
        for label, link in [
            ("Needs attention", console),
            ("Failure groups", f"{console}failures/"),
            ("Unknown outcomes", f"{console}?state={State.UNKNOWN}"),
            ("Awaiting approval", f"{console}?state={State.PENDING_APPROVAL}"),
            ("Conflicts", f"{console}conflicts/"),
            ("Refused deliveries", f"{console}deliveries/"),
            ("Dashboard", f"{console}dashboard/"),
            ("Audit trail", f"{console}audit/"),
        ]:
            lines.append(f"  {label + ':':<20} {link}")
        for state, label in EXAMPLES.items():
            example = operations.filter(state=state).order_by("id").first()
            if example is not None:
                lines.append(f"  {label + ':':<20} {console}operations/{example.pk}/  ({example.key})")
        text = "\n".join(lines) + "\n"
        if not summary:
            self.stdout.write("")
            self.stdout.write(text, ending="")
            return
        path = Path(summary)
        rest = path.read_text() if path.exists() else ""
        path.write_text(text + "\n" + rest)
