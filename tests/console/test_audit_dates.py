"""The audit page answers any date filter on purpose: a date it cannot work with is a form error."""

import re

import pytest

from ledger.people import pause


def field_errors(response) -> list[str]:
    return re.findall(r'<span class="field-error">([^<]*)</span>', response.content.decode())


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ({"created_before": "9999-12-31"}, "Ensure this value is less than or equal to 2999-12-31."),
        ({"created_after": "9999-12-31"}, "Ensure this value is less than or equal to 2999-12-31."),
        ({"created_after": "0001-01-01"}, "Ensure this value is greater than or equal to 1970-01-01."),
        ({"created_before": "0001-01-01"}, "Ensure this value is greater than or equal to 1970-01-01."),
        ({"created_before": "10000-01-01"}, "Enter a valid date."),
        ({"created_after": "2030-02-30"}, "Enter a valid date."),
        ({"created_after": "yesterday"}, "Enter a valid date."),
        ({"created_before": "\x00"}, "Enter a valid date."),
    ],
)
def test_it_answers_a_date_out_of_range_or_garbage_with_a_form_error(client, login, workspace, query, error):
    """The day after 9999-12-31 cannot be computed (it was a 500); such dates are refused by the form,
    and the page still lists the events, unfiltered by the refused date."""
    pause.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)
    login("viewer")

    response = client.get("/console/audit/", query)

    assert response.status_code == 200
    assert field_errors(response) == [error]
    assert "alice" in response.content.decode()


def test_it_filters_by_the_bounds_themselves(client, login, workspace):
    """The first and last days allowed are taken, and filter as any other day."""
    pause.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)
    login("viewer")

    response = client.get("/console/audit/", {"created_after": "1970-01-01", "created_before": "2999-12-31"})

    assert response.status_code == 200
    assert field_errors(response) == []
    assert "alice" in response.content.decode()


def test_it_tells_the_browser_the_bounds_of_its_date_pickers(client, login):
    """The date inputs carry min and max, so a browser offers only days the filter takes."""
    login("viewer")

    page = client.get("/console/audit/").content.decode()

    for name in ("created_after", "created_before"):
        assert re.search(rf'<input type="date" name="{name}" min="1970-01-01" max="2999-12-31"', page), name
