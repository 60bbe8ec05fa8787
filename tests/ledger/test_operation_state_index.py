"""``operation_state_idx`` (migration 0064): the operations by state, but the succeeded ones, which no
query reads by state. Its readers still plan through it, and a succeeded operation is no entry in
it: a move to succeeded writes one index entry fewer. (/metrics' count of the unfinished operations
reads it too, at volume: docs/performance.md; on a table this small its plan could take either of
two partial indexes.)"""

from django.db import connection
from django.utils import timezone

from ledger.models import Operation
from ledger.states import State
from tests.plans import only_index

INDEX = "operation_state_idx"


def plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small is read whole otherwise
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_sweeps_expired_leases_are_read_through_it(db):
    only_index("ledger_operation", INDEX)
    expired = Operation.objects.filter(state=State.PROCESSING, lease_expires_at__lt=timezone.now())[:500]

    assert INDEX in plan(expired)


def test_the_queues_count_of_one_state_is_read_through_it(db):
    only_index("ledger_operation", INDEX)
    for state in (State.PENDING, State.RETRYING, State.PROCESSING, State.CANCELLED):
        bounded = Operation.objects.filter(state=state).order_by().values("pk")[:10001]

        assert INDEX in plan(bounded), state


def test_a_succeeded_operation_has_no_entry_in_it(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [INDEX])
        [definition] = cursor.fetchone()

    assert definition.endswith("(state, next_attempt_at) WHERE (NOT ((state)::text = 'succeeded'::text))")
    assert INDEX not in plan(Operation.objects.filter(state=State.SUCCEEDED))
