import pytest

from tests.faults.qcluster import cluster_pool


@pytest.fixture
def start_cluster(transactional_db, tmp_path):
    """Starts qclusters against the test database; stops them before the database is flushed."""
    with cluster_pool(tmp_path) as start:
        yield start
