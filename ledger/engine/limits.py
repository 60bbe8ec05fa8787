"""A destination's limits, for the whole cluster: pacing, a cap on calls in flight, a circuit breaker.

A destination may declare (``ActionDefinition.limits``) how fast it may be called, how many calls
may be in flight at once and when to stop calling it for a while. Every call to it passes a
``Gate``, whatever made it due (a first try, a retry, a person's replay, a bulk replay of a failure
group: all are claimed and called by ``ledger.engine.processing``), and so does every lookup
(``ledger.engine.lookups``):

- Pacing: a call takes the next free moment of the destination's row
  (``DestinationHealth.next_call_at``, 1/rate after the one taken before, by any worker) in one
  statement, and waits for it: calls begin evenly spaced, never in a burst.
- Slots: a call in flight holds one of the destination's ``concurrency`` PostgreSQL advisory locks,
  taken on the worker's own connection. Nothing is written, and a worker that dies lets go of its
  slots with its connection. Behind a pooler in transaction mode (``DATABASE_POOL_MODE``) a session
  lock would stay with the server session that took it, which the pooler hands to other clients
  (who would take it again at once, as their own): there a slot is a leased row instead
  (``DestinationSlot``), taken in one statement, let go by its holder, and a dead worker's comes
  back when its lease, a task's timeout, ends.
- The breaker: each transient or ambiguous failure adds one to ``failures_in_row``, any answer
  sets it back to 0. At the threshold the breaker opens: no call until ``breaker_until``, and a
  claimed operation is given back untried (``hold``: retrying, due when the pause ends, its last
  error saying why, which the console shows). A call is counted before its slot is given back, and
  the breaker is read again once a slot is taken (``recheck``): a worker admitted before another's
  failures opened it gives its calls back too. Once the pause is over one worker takes the probe
  (moving ``breaker_until`` on by a cool-down, so no other worker probes meanwhile); the probe's
  success closes the breaker, its failure opens it for another cool-down.

A destination without limits (every coded action by default) costs nothing here: no query, no lock.
"""

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ledger import timed
from ledger.actions import ActionDefinition, Limits
from ledger.core import nudges
from ledger.core.transitions import record_audit_event, transition_many
from ledger.models import DestinationHealth, Operation
from ledger.outcomes import AmbiguousError, OutcomeError, TransientError
from ledger.states import State

# How long a worker that finds a free slot missing waits before it looks again.
SLOT_WAIT_SECONDS = 0.05
# While another worker's probe is in flight, operations are given back for this long, not for a
# whole cool-down: the probe usually answers well before.
PROBE_RECHECK = timedelta(seconds=5)


# Takes up to ``wanted`` of the slots whose lease has ended (or that were never taken), lowest first.
# Two workers may pick the same one: the second one's insert waits for the first's, and then finds
# it held (the update's condition is read again on the row as committed), so it is taken once.
_LEASE_SLOTS = """
WITH free AS (
    SELECT n FROM generate_series(0, %(concurrency)s - 1) AS n
    WHERE NOT EXISTS (
        SELECT FROM ledger_destinationslot AS held
        WHERE held.name = %(name)s AND held.slot = n AND held.held_until > clock_timestamp()
    )
    ORDER BY n LIMIT %(wanted)s
)
INSERT INTO ledger_destinationslot AS lease (name, slot, holder, held_until)
SELECT %(name)s, n, %(holder)s, clock_timestamp() + make_interval(secs => %(lease)s) FROM free ORDER BY n
ON CONFLICT (name, slot) DO UPDATE SET holder = excluded.holder, held_until = excluded.held_until
WHERE lease.held_until <= clock_timestamp()
RETURNING lease.slot
"""


def row_name(action: ActionDefinition) -> str:
    """The destination's ``DestinationHealth`` row (the name ``ledger.engine.processing`` groups by)."""
    return DestinationHealth.row_of(action.destination_name())


class Gate:
    """One destination's limits, as one worker passes them: the slots it holds, and what it knows
    of the breaker."""

    def __init__(self, action: ActionDefinition, *, actor: str = "opsconsole"):
        self.actor = actor  # who the breaker's audit events name: the worker that opened or closed it
        self.destination = action.destination_name()
        self.name = row_name(action)
        self.limits: Limits = action.limits()
        self.slots: list[int] = []
        self.leased = settings.DATABASE_POOL_MODE == "transaction"
        self.holder = uuid.uuid4().hex  # whose leased slots these are
        # Whether the row may hold failures or a pause this worker has not cleared yet.
        self.breaker_dirty = False
        # Set when this worker took the probe, or when a failure it noted opened the breaker.
        self.probing = False
        self.paused_until: datetime | None = None

    # --- pacing and slots ---------------------------------------------------------------------

    def take_slots(self, wanted: int) -> int:
        """Take up to ``wanted`` free slots; how many may be called now (all of ``wanted`` when
        there is no cap)."""
        if not self.limits.concurrency or wanted <= 0:
            return max(wanted, 0)
        with connection.cursor() as cursor:
            if self.leased:
                cursor.execute(_LEASE_SLOTS, self._lease_parameters(wanted))
            else:
                cursor.execute(
                    # Not the slots held already: a session's advisory lock is taken again by it at once.
                    "SELECT slot FROM generate_series(0, %s - 1) AS slot WHERE slot <> ALL(%s::int[])"
                    " AND pg_try_advisory_lock(hashtextextended(%s::text || slot, 0)) LIMIT %s",
                    [self.limits.concurrency, self.slots, self._slot_prefix(), wanted],
                )
            taken = [slot for (slot,) in cursor.fetchall()]
        self.slots.extend(taken)
        return len(taken)

    def give_back(self, count: int = 1) -> None:
        """Let go of ``count`` slots (calls that ended)."""
        if not self.limits.concurrency or count <= 0:
            return
        freed, self.slots = self.slots[:count], self.slots[count:]
        with connection.cursor() as cursor:
            if self.leased:
                cursor.execute(
                    "UPDATE ledger_destinationslot SET held_until = '-infinity', holder = ''"
                    " WHERE name = %s AND holder = %s AND slot = ANY(%s::int[])",
                    [self.name, self.holder, freed],
                )
            else:
                cursor.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s::text || slot, 0)) FROM unnest(%s::int[]) AS slot",
                    [self._slot_prefix(), freed],
                )

    def give_back_all(self) -> None:
        self.give_back(len(self.slots))

    def _slot_prefix(self) -> str:
        return f"ledger.slot:{self.name}:"

    def _lease_parameters(self, wanted: int) -> dict:
        return {
            "name": self.name,
            "concurrency": self.limits.concurrency,
            "wanted": wanted,
            "holder": self.holder,
            # A call is made inside a task, which the cluster ends after its timeout, or in a
            # person's request (a replay's or a cancellation's lookup), which gunicorn ends sooner.
            "lease": settings.Q_CLUSTER["timeout"],
        }

    def wait_for_turn(self) -> None:
        """Wait for the next free moment to call (nothing when there is no rate limit)."""
        if not self.limits.rate_per_second:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ledger_destinationhealth AS row (name, next_call_at, failures_in_row, probing)"
                " VALUES (%(name)s, clock_timestamp() + make_interval(secs => %(step)s), 0, false)"
                " ON CONFLICT (name) DO UPDATE SET next_call_at ="
                " greatest(row.next_call_at, clock_timestamp()) + make_interval(secs => %(step)s)"
                " RETURNING extract(epoch FROM row.next_call_at - clock_timestamp()) - %(step)s",
                {"name": self.name, "step": 1 / self.limits.rate_per_second},
            )
            (wait,) = cursor.fetchone()
        if wait > 0:
            time.sleep(float(wait))

    @contextmanager
    def one_call(self, keep_waiting=lambda: None) -> Iterator[None]:
        """One call under the limits: a slot (waiting for one, ``keep_waiting`` between looks),
        then its moment."""
        while not self.take_slots(1):
            keep_waiting()
            time.sleep(SLOT_WAIT_SECONDS)
        try:
            self.wait_for_turn()
            yield
        finally:
            self.give_back(1)

    # --- the breaker --------------------------------------------------------------------------

    def admission(self, now: datetime | None = None) -> datetime | None:
        """None when calls may go ahead (the breaker is closed, or this worker took the probe);
        else until when they are paused."""
        if not self.limits.breaker_threshold:
            return None
        now = now or timezone.now()
        row = self._row().values("failures_in_row", "breaker_until", "probing").first()
        if row is None:
            return None
        self.breaker_dirty = row["failures_in_row"] > 0 or row["breaker_until"] is not None
        until = row["breaker_until"]
        if until is None:
            return None
        if until > now:
            return min(until, now + PROBE_RECHECK) if row["probing"] else until
        self.probing = self._take_probe()
        return None if self.probing else now + PROBE_RECHECK

    def recheck(self) -> datetime | None:
        """Just before a call leaves, its slot taken: None when it may leave; else until when calls
        are paused. Another worker's failures may have opened the breaker since this worker's
        ``admission`` (its calls waited for a slot meanwhile); the probe this worker took goes."""
        if not self.limits.breaker_threshold or self.probing:
            return None
        until = self._row().values_list("breaker_until", flat=True).first()
        if until is None:
            return None
        self.breaker_dirty = True
        now = timezone.now()
        # Over but not probed yet: the next batch's admission takes the probe, which goes alone.
        return until if until > now else now + PROBE_RECHECK

    def _row(self):
        return DestinationHealth.objects.filter(name=self.name)

    def _take_probe(self) -> bool:
        now = timezone.now()
        taken = (
            self._row()
            .filter(breaker_until__lte=now)
            .update(probing=True, breaker_until=now + self.limits.breaker_cooldown)
        )
        return bool(taken)

    def note(self, *, failed: bool) -> None:
        """Count one call for the breaker: a failure (``failed_call``, ``failed_try``) adds one to
        the failures in a row and may open it (``paused_until``); an answer closes it."""
        if not self.limits.breaker_threshold:
            return
        if failed:
            self.paused_until = self._failed()
        elif self.breaker_dirty:
            self._closed()
            self.breaker_dirty = self.probing = False

    def _closed(self) -> None:
        with transaction.atomic():
            if (
                self._row()
                .filter(breaker_until__isnull=False)
                .update(failures_in_row=0, breaker_until=None, probing=False)
            ):
                self._audit("breaker_closed", f"calls to {self.destination} resume: a call was answered")
            else:
                self._row().filter(failures_in_row__gt=0).update(failures_in_row=0)

    def _failed(self) -> datetime | None:
        self.breaker_dirty, self.probing = True, False
        until = timezone.now() + self.limits.breaker_cooldown
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ledger_destinationhealth AS row (name, failures_in_row, probing, breaker_until)"
                " VALUES (%(name)s, 1, false, CASE WHEN %(threshold)s <= 1 THEN %(until)s END)"
                " ON CONFLICT (name) DO UPDATE SET failures_in_row = row.failures_in_row + 1, probing = false,"
                # Opened by the failure that reaches the threshold, or a probe's; one more of the
                # calls in flight when it opened does not push the end of the pause on.
                "  breaker_until = CASE WHEN row.probing"
                "   OR (row.breaker_until IS NULL AND row.failures_in_row + 1 >= %(threshold)s)"
                "   THEN %(until)s ELSE row.breaker_until END"
                " RETURNING breaker_until",
                # The workers' clock, as for every other deadline of the engine.
                {
                    "name": self.name,
                    "threshold": self.limits.breaker_threshold,
                    "until": until,
                },
            )
            (paused_until,) = cursor.fetchone()
            if paused_until == until:
                self._audit("breaker_opened", self.paused_message(), times=timed.kept(paused_until=until))
        return paused_until

    def _audit(self, kind: str, message: str, *, times: dict | None = None) -> None:
        record_audit_event(actor=self.actor, kind=kind, message=message, times=times)

    def paused_message(self) -> str:
        """Why calls wait, with ``{paused_until}`` where the time goes (``ledger.timed``)."""
        return f"calls to {self.destination} paused until {{paused_until}} (circuit breaker)"


def failed_call(outcome: object) -> bool:
    """Whether a call's outcome says the destination is in trouble: a transient or ambiguous
    failure, or an unexpected error (ambiguous for an external call). A refusal is an answer."""
    if not isinstance(outcome, Exception):
        return False
    return isinstance(outcome, TransientError | AmbiguousError) or not isinstance(outcome, OutcomeError)


def failed_try(operation: Operation) -> bool:
    """Whether the try ``ledger.engine.performing`` just recorded for ``operation`` failed as
    ``failed_call`` counts failures (read from what it recorded)."""
    return operation.state in (State.RETRYING, State.UNKNOWN, State.NEEDS_REVIEW) and operation.last_error_category in (
        TransientError.category,
        AmbiguousError.category,
    )


def hold(operations: list[Operation], gate: Gate, until: datetime, *, worker: str) -> list[Operation]:
    """Give claimed ``operations`` back untried while their destination's calls are paused: retrying,
    due at ``until``, the claim's count of tries given back; their last error says why (the console
    shows it). Guarded by the claims' tokens: one someone else took over stays as it is."""
    if not operations:
        return []
    reason, times = gate.paused_message(), timed.kept(paused_until=until)
    with transaction.atomic():
        held = transition_many(
            operations,
            to_state=State.RETRYING,
            actor=worker,
            kind="held",
            tokens=[operation.fencing_token for operation in operations],
            # The claim counted a try that was never made: given back, so that a long pause does
            # not spend ``max_attempts`` (as an expired claim that began no try gives it back).
            each={"attempts": [max(operation.attempts - 1, 0) for operation in operations]},
            error_category=TransientError.category,
            message=reason,
            times=times,
            same={
                "last_error_category": TransientError.category,
                "last_error_message": reason,
                "last_error_times": times,
                "lease_owner": "",
                "lease_expires_at": None,
                "next_attempt_at": until,
            },
        )
        transaction.on_commit(partial(nudges.enqueue_processing, None, at=until))
    return held
