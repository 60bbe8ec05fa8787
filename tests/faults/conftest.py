import pytest

from tests.conftest import requires_postgres
from tests.faults.qcluster import cluster_pool


@pytest.fixture
def start_cluster(transactional_db, tmp_path):
    """Starts qclusters against the test database; stops them before the database is flushed."""
    requires_postgres()
    with cluster_pool(tmp_path) as start:
        yield start
