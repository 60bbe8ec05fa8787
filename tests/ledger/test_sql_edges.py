"""SQL that moves states itself takes only edges of the state table (``ledger.states``): the
function as the migrated database holds it (``pg_get_functiondef``), not as a file says it should
be, is read back and its states compared with the table."""

import re

import pytest
from django.db import connection

from ledger.states import CLAIMABLE_STATES, State, can_transition, sql_edges


def function_text(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_functiondef(%s::regproc)", [name])
        return cursor.fetchone()[0]


def quoted(listed: str) -> set[str]:
    return set(re.findall(r"'(\w+)'", listed))


@pytest.mark.parametrize("to_state", list(State))
def test_sql_edges_are_the_states_the_table_moves_to_a_state_from(to_state):
    assert set(sql_edges(to_state)) == {state for state in State if can_transition(state, to_state)}
    assert list(sql_edges(to_state)) == sorted(sql_edges(to_state))


def test_finishing_a_set_in_its_claim_moves_rows_only_from_the_claimable_states_the_table_allows(db):
    """ledger_finish_claimed: its guarded UPDATE takes rows in the states its ``state IN (..)``
    lists, which must be the claimable states the table lets reach the state its SET writes; the
    one move it audits per row is that edge, from the row's own state (one of the guard's)."""
    text = function_text("ledger_finish_claimed")

    [guard] = re.findall(r"\bstate\s+IN\s*\(([^)]*)\)", text, flags=re.IGNORECASE)
    from_states = quoted(guard)
    [written] = re.findall(r"\bSET\s+state\s*=\s*'(\w+)'", text, flags=re.IGNORECASE)
    assert from_states == set(sql_edges(written)) & CLAIMABLE_STATES == set(CLAIMABLE_STATES)

    audited = re.findall(r"'kind', '(\w+)', 'from_state', ([^,]+), 'to_state', '(\w+)'", text)
    assert [(kind, to_state) for kind, _, to_state in audited] == [("succeeded", written)]
    [(_, audited_from, _)] = audited
    assert "from_state" in audited_from  # each row's own state: one of the guard's
    assert all(can_transition(state, written) for state in from_states)


def test_a_claim_in_sql_moves_rows_only_along_the_tables_edge_to_processing(db):
    """ledger_claim: its guarded UPDATE takes rows in the claimable states its ``state IN (..)``
    lists, each of which the table lets reach the state its SET writes (processing); a new event it
    creates claimed is inserted in that state, once ledger_claim_answer answered ``claimed`` for
    its first state; the one move it audits is that edge, from the row's own state as held or
    first (``operation.state``)."""
    text = function_text("ledger_claim")

    [guard] = re.findall(r"\bo\.state\s+IN\s*\(([^)]*)\)", text, flags=re.IGNORECASE)
    assert quoted(guard) == set(CLAIMABLE_STATES)
    [written] = re.findall(r"\bSET\s+state\s*=\s*'(\w+)'", text, flags=re.IGNORECASE)
    assert written == State.PROCESSING
    assert all(can_transition(state, written) for state in quoted(guard))

    audited = re.findall(r"'kind', '(\w+)', 'from_state', ([^,]+), 'to_state', '(\w+)'", text)
    assert audited == [("claimed", "operation.state", written)]
    [created] = re.findall(r"IF answer = 'claimed' THEN\s+reserve := jsonb_set\([^;]*'state', '(\w+)'", text)
    assert created == written
    # What it decides without moving: the states its answers name are the table's states; it
    # answers claimed only from those.
    [decided] = re.findall(
        r"operation\.state\s+NOT\s+IN\s*\(([^)]*)\)", function_text("ledger_claim_answer"), flags=re.IGNORECASE
    )
    assert quoted(decided) == set(CLAIMABLE_STATES)


def test_a_success_reported_in_sql_moves_rows_only_along_the_tables_edge_to_succeeded(db):
    """ledger_report_outcome: its guarded UPDATE takes only a row a claim holds (``processing``, the
    one state its ``state IN (..)`` lists, after its check of the held row's state), which the table
    lets reach the state its SET writes (succeeded); the one move it audits is that edge, from the
    row's state as held."""
    text = function_text("ledger_report_outcome")

    [guard] = re.findall(r"\bo\.state\s+IN\s*\(([^)]*)\)", text, flags=re.IGNORECASE)
    assert quoted(guard) == {State.PROCESSING}
    [held] = re.findall(r"operation\.state\s*<>\s*'(\w+)'", text)
    assert held == State.PROCESSING
    [written] = re.findall(r"\bSET\s+state\s*=\s*'(\w+)'", text, flags=re.IGNORECASE)
    assert written == State.SUCCEEDED
    assert all(can_transition(state, written) for state in quoted(guard))

    audited = re.findall(r"'kind', '(\w+)', 'from_state', ([^,]+), 'to_state', '(\w+)'", text)
    assert audited == [("succeeded", "operation.state", written)]
