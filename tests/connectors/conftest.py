"""Fixtures the connector tests share (tests/connectors: the TypeScript client, the Node-RED nodes and
the n8n node run in their real runtimes). Each platform's own helpers live in a module of its own
(tests/connectors/typescript.py, node_red.py, n8n.py); a test module may define a fixture of the same
name to change it for its tests.
"""

import pytest

from tests.faults.gunicorn import running_gunicorn
from tests.faults.qcluster import cluster_pool


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    """One gunicorn for the module, as `make serve` runs it, on the test database (starting one is a
    good part of a test's time); each test's rows are its own (transactional tests)."""
    with django_db_blocker.unblock():
        with running_gunicorn(tmp_path_factory.mktemp("gunicorn")) as running:
            yield running


@pytest.fixture
def start_cluster(transactional_db, tmp_path):
    """Starts qclusters against the test database; stops them before the database is flushed."""
    with cluster_pool(tmp_path) as start:
        yield start
