"""Fixtures of the client's unit tests. They need no database: nothing here touches Django
(tests/conftest.py, which does, applies only under tests/)."""

import httpx
import pytest
from fake_claims import FakeClaims

from opsconsole_claims import Ledger, _transport


@pytest.fixture
def server():
    return FakeClaims()


@pytest.fixture
def ledger(server):
    """A client of the fake server, with a fast heartbeat."""
    with Ledger(
        "http://opsconsole.test", "secret-token", heartbeat_every=0.02, transport=httpx.MockTransport(server.handle)
    ) as client:
        yield client


@pytest.fixture(autouse=True)
def sleeps(monkeypatch):
    """The retries' waits are recorded, not slept."""
    waited: list[float] = []
    monkeypatch.setattr(_transport, "sleep", waited.append)
    return waited
