import pytest
from django.db import connection

from ledger import services


def pytest_report_header(config):
    from django.conf import settings

    return f"database: {settings.DATABASES['default']['ENGINE']}"


@pytest.fixture
def workspace_and_token(db):
    return services.create_workspace(slug="demo", approved_owners=["ops"], actor="test")


@pytest.fixture
def workspace(workspace_and_token):
    return workspace_and_token[0]


@pytest.fixture
def token(workspace_and_token):
    return workspace_and_token[1]


@pytest.fixture
def api(client, token):
    """A Django test client that sends the workspace's bearer token and JSON bodies."""

    class Api:
        def post(self, path, body, **extra):
            data = body if isinstance(body, str | bytes) else __import__("json").dumps(body)
            return client.post(path, data, content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {token}", **extra)

        def get(self, path, **extra):
            return client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}", **extra)

    return Api()


@pytest.fixture
def sync_queue(monkeypatch):
    """Run django-q2 tasks in the caller (the override_settings route does nothing for django-q2)."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


def requires_postgres():
    if connection.vendor != "postgresql":
        pytest.skip(f"needs PostgreSQL for real concurrency (running on {connection.vendor})")


R42 = {"request_id": "R-42", "version": 3, "title": "Review renewal options", "owner": "ops"}


def event(delivery_id="delivery-1", **data):
    return {"action": "prepare-brief", "delivery_id": delivery_id, "data": R42 | data}
