"""The read replica's alias and its choice: configured only by DATABASE_REPLICA_URL, never written or
migrated, asked for by name (tests/opsconsole/test_read_replica.py runs a real one)."""

import json

from ledger.reads import replica
from tests.opsconsole.test_settings import load_settings

REPLICA_URL = "postgres://reader@10.0.0.9:5433/opsconsole"
SHOWN = (
    "__import__('json').dumps({alias: {k: d.get(k) for k in ('ENGINE', 'HOST', 'PORT', 'CONN_MAX_AGE', "
    "'CONN_HEALTH_CHECKS', 'OPTIONS', 'TEST')} for alias, d in s.DATABASES.items()} | "
    "{'routers': s.DATABASE_ROUTERS, 'warning': s.OPSCONSOLE_REPLICA_LAG_WARNING_SECONDS})"
)


def test_it_has_no_replica_without_its_url():
    result = load_settings(DEBUG="1", show=SHOWN)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert "replica" not in shown
    assert shown["warning"] == 5


def test_the_replica_is_connected_like_the_primary_and_mirrors_it_in_tests():
    result = load_settings(
        DEBUG="1", DATABASE_REPLICA_URL=REPLICA_URL, OPSCONSOLE_REPLICA_LAG_WARNING_SECONDS="12", show=SHOWN
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    primary, reader = shown["default"], shown["replica"]
    assert (reader["HOST"], reader["PORT"]) == ("10.0.0.9", 5433)
    for kept in ("ENGINE", "CONN_MAX_AGE", "CONN_HEALTH_CHECKS"):
        assert reader[kept] == primary[kept], kept
    assert reader["OPTIONS"]["prepare_threshold"] == primary["OPTIONS"]["prepare_threshold"]
    assert reader["OPTIONS"]["connect_timeout"] == 3
    assert reader["TEST"] == {"MIRROR": "default"}
    assert shown["routers"] == ["ledger.reads.replica.Router"]
    assert shown["warning"] == 12


def test_it_refuses_a_replica_that_is_not_postgresql():
    result = load_settings(DEBUG="1", DATABASE_REPLICA_URL="mysql://u@h/db")
    assert result.returncode != 0
    assert "DATABASE_REPLICA_URL must name a PostgreSQL database" in result.stderr


def test_the_router_never_writes_or_migrates_the_replica():
    router = replica.Router()
    assert router.db_for_write(object) == "default"
    assert router.db_for_read(object) is None  # where the code says, else the primary
    assert router.allow_migrate("replica", "ledger") is False
    assert router.allow_migrate("default", "ledger") is None


def test_lists_read_the_primary_without_a_replica():
    assert replica.for_lists() == "default"
    assert replica.lag_notice("default") == ""


def test_the_lag_is_said_past_the_setting_only():
    assert replica.lag_text(5.0, 5) == ""
    assert replica.lag_text(0.0, 5) == ""
    assert replica.lag_text(42.4, 5) == (
        "These lists read from a replica that is 42 s behind: the newest changes may be missing."
    )
