"""The states that wait for a person are named once (``ledger.states.ATTENTION_STATES``): the queue,
/metrics and the partial indexes that serve the queue all read that name, and the indexes still
match the migrations that created them."""

from django.core.management import call_command

from ledger.models import Operation
from ledger.states import ATTENTION_STATES, TERMINAL_STATES, State
from opsconsole.console.filters import QueueFilter


def test_they_are_the_unfinished_states_no_worker_moves_on_its_own():
    assert set(ATTENTION_STATES) == {State.NEEDS_REVIEW, State.UNKNOWN, State.PENDING_APPROVAL}
    assert not set(ATTENTION_STATES) & TERMINAL_STATES


QUEUE_INDEXES = {
    "operation_attention_idx",
    "operation_arrival_idx",
    "operation_state_updated_idx",
    "operation_state_arrival_idx",
    "operation_state_count_age_idx",
}


def test_the_queues_indexes_cover_exactly_them_and_need_no_migration(db):
    conditions = {
        index.name: index.condition.children for index in Operation._meta.indexes if index.name in QUEUE_INDEXES
    }
    assert set(conditions) == QUEUE_INDEXES
    assert all(children == [("state__in", list(ATTENTION_STATES))] for children in conditions.values())
    call_command("makemigrations", "ledger", "--check", "--dry-run", verbosity=0)


def test_the_queue_offers_them_in_their_order(db):
    choices = [value for value, _ in QueueFilter().filters["state"].extra["choices"]]
    assert choices == ["all", *ATTENTION_STATES, "due", "held"]
