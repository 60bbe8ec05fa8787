import httpx
import pytest

from standin import start_in_thread


@pytest.fixture(scope="module")
def standin():
    """One stand-in server per test module, on a free port; returns its base URL."""
    server, base_url = start_in_thread()
    yield base_url
    server.shutdown()


@pytest.fixture
def http(standin):
    """A real HTTP client on a freshly reset stand-in."""
    with httpx.Client(base_url=standin, timeout=5) as client:
        client.post("/_reset").raise_for_status()
        yield client


def add_faults(http, *faults):
    """Queues faults (for POST /records unless a fault says "on": "lookup"); returns the create queue."""
    response = http.post("/_faults", json={"faults": list(faults)})
    assert response.status_code == 200, response.text
    return response.json()["faults"]


def add_lookup_faults(http, *faults):
    """Queues faults for GET /records; returns the lookup queue."""
    response = http.post("/_faults", json={"faults": [{**fault, "on": "lookup"} for fault in faults]})
    assert response.status_code == 200, response.text
    return response.json()["lookup_faults"]


def records(http, **filters):
    response = http.get("/records", params=filters)
    assert response.status_code == 200, response.text
    return response.json()["records"]
