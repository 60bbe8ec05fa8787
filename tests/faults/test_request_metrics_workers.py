"""Under gunicorn each worker counts its own requests; one scrape of /metrics, answered by whichever
worker, shows the sum over all of them (prometheus-client's multiprocess mode, set up by
opsconsole/gunicorn.conf.py in a directory of its own that it removes when it stops).

Real processes on PostgreSQL: gunicorn with 2 workers, as `make serve` runs it.
"""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict

from tests.conftest import event
from tests.faults.gunicorn import running_gunicorn

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

METRICS_TOKEN = "scrape-me-0123456789"
KEY = "demo:R-42:v3:prepare-brief"
COUNT = "opsconsole_http_requests_total"
ROUTE = '{method="GET",route="/api/v1/operations/{key}",status="200"}'


def counted_by_each_worker(directory) -> list[float]:
    """The GET count of the route as each worker's own file holds it."""
    counts = []
    for path in sorted(directory.glob("counter_*.db")):
        values = MmapedDict.read_all_values_from_file(str(path))
        counts.append(
            sum(
                value
                for key, value, *_ in values
                if '"opsconsole_http_requests_total"' in key
                and '"/api/v1/operations/{key}"' in key
                and '"GET"' in key
                and '"200"' in key
            )
        )
    return counts


def test_one_scrape_sums_the_counts_of_both_workers(workspace, token, tmp_path):
    env = {"WEB_CONCURRENCY": "2", "OPSCONSOLE_METRICS_TOKEN": METRICS_TOKEN, "TMPDIR": str(tmp_path)}
    sent = 0
    with running_gunicorn(tmp_path, env=env) as server:
        [directory] = tmp_path.glob("opsconsole-metrics-*")
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.post(f"{server.url}/api/v1/events", json=event("d-1"), headers=headers).status_code == 201

        def get(_):
            return httpx.get(f"{server.url}/api/v1/operations/{KEY}", headers=headers, timeout=30).status_code

        # Eight clients at once keep both workers busy; sent again until each worker has counted some.
        with ThreadPoolExecutor(max_workers=8) as pool:
            for _ in range(20):
                statuses = list(pool.map(get, range(40)))
                assert set(statuses) == {200}
                sent += len(statuses)
                if len([n for n in counted_by_each_worker(directory) if n > 0]) == 2:
                    break
        per_worker = counted_by_each_worker(directory)
        scraped = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text

    assert len([n for n in per_worker if n > 0]) == 2, f"one worker served everything: {per_worker}"
    assert sum(per_worker) == sent
    [line] = [line for line in scraped.splitlines() if line.startswith(COUNT + ROUTE)]
    assert float(line.rsplit(" ", 1)[1]) == sent
    assert not directory.exists(), "gunicorn left its metrics directory behind"
