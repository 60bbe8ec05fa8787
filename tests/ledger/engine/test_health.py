"""A destination is working, for the whole cluster, while the last batches that met it all
succeeded within the last five minutes and nothing failed since; noting it costs a write every few
seconds, not one per batch."""

from datetime import timedelta

from ledger.engine import destination_health
from ledger.models import DestinationHealth
from tests.ledger.conftest import START

NAME = "destination:http://crm.example:443"


def test_a_destination_never_met_is_not_working(db):
    assert destination_health.health_of(NAME).working(START) is False


def test_a_batch_that_all_succeeded_makes_it_working_for_the_window(db):
    destination_health.record(destination_health.health_of(NAME), ok=True, now=START)

    window_ends = START + destination_health.WORKING_WINDOW
    assert destination_health.health_of(NAME).working(window_ends - timedelta(seconds=1)) is True
    assert destination_health.health_of(NAME).working(window_ends + timedelta(seconds=1)) is False


def test_a_failure_after_the_success_makes_it_cold_again(db):
    destination_health.record(destination_health.health_of(NAME), ok=True, now=START)
    destination_health.record(destination_health.health_of(NAME), ok=False, now=START + timedelta(seconds=1))

    assert destination_health.health_of(NAME).working(START + timedelta(seconds=2)) is False

    destination_health.record(destination_health.health_of(NAME), ok=True, now=START + timedelta(seconds=3))
    assert destination_health.health_of(NAME).working(START + timedelta(seconds=4)) is True


def test_it_writes_a_success_at_most_once_per_resolution(db, django_assert_num_queries):
    destination_health.record(destination_health.health_of(NAME), ok=True, now=START)
    seen = destination_health.health_of(NAME)

    with django_assert_num_queries(0):
        destination_health.record(seen, ok=True, now=START + destination_health.RESOLUTION - timedelta(seconds=1))
    with django_assert_num_queries(1):
        destination_health.record(seen, ok=True, now=START + destination_health.RESOLUTION + timedelta(seconds=1))

    written_at = START + destination_health.RESOLUTION + timedelta(seconds=1)
    assert DestinationHealth.objects.get(name=NAME).last_ok_at == written_at
