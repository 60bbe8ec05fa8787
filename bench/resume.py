"""Benchmark: resuming a pause that held 100,000 operations.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-resume

PostgreSQL only; a scratch database beside ``DATABASE_URL`` (``bench.harness.run_in_scratch_database``),
dropped at the end. One operation is submitted through intake, then copied with SQL into
``RESUME_OPERATIONS`` (100,000) pending ones, all held by a global pause pulled an hour ago. Then,
in rounds (``RESUME_ROUNDS``, 5), interleaved:

- **the resume**: ``ledger.people.pause.set_paused(paused=False)`` with every one of them held, against
  the same call with nothing held (its baseline: the switch, its interval and its audit event), and
  against what a resume wrote before held time was kept per switch (its UPDATEs of every held row, the same statements,
  run in a transaction that is rolled back): milliseconds, and the rows of ``ledger_operation`` it
  updated and left dead (``pg_stat_user_tables``, flushed after each);
- **the first claim after it** (``claim_due_operations``, 100 rows): each claimed row is given its
  held time by ``ledger_held_deadline``, against a claim of 100 rows after the intervals are
  forgotten (the function is then not asked). The claimed rows are put back as they were.

Nothing is asserted: a benchmark reports and exits 0.
"""

import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
OPERATIONS = int(os.environ.get("RESUME_OPERATIONS", "100000"))
ROUNDS = int(os.environ.get("RESUME_ROUNDS", "5"))
HELD_FOR = timedelta(hours=1)
CLAIM = 100


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    from bench.harness import run_in_scratch_database

    run_in_scratch_database("resume", run, keep=False)


def run(label: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    print(f"resume benchmark on {label}: {OPERATIONS:,} held operations, {ROUNDS} rounds", flush=True)
    load(OPERATIONS)
    figures: dict[str, list[float]] = {name: [] for name in ("now", "empty", "before", "claim", "claim_plain")}
    written: dict[str, list[tuple[int, int]]] = {"now": [], "before": []}
    for round_number in range(ROUNDS):
        for name in rotated(["now", "empty", "before"], round_number):
            ms, rows = MEASURES[name]()
            figures[name].append(ms)
            if name in written:
                written[name].append(rows)
        for name in rotated(["claim", "claim_plain"], round_number):
            figures[name].append(CLAIMS[name]())
        print(
            f"  round {round_number + 1}: " + ", ".join(f"{k} {v[-1]:.1f} ms" for k, v in figures.items()), flush=True
        )
    report(figures, written)


def rotated(names: list[str], by: int) -> list[str]:
    by %= len(names)
    return names[by:] + names[:by]


# --- the data ---------------------------------------------------------------------------------------


def load(count: int) -> None:
    """One operation through intake, copied into ``count`` pending ones (keys varied) with SQL."""
    from django.db import connection

    from ledger.core import accounts
    from ledger.intake.submit import submit_event
    from ledger.models import Operation

    workspace, _ = accounts.create_workspace(slug="bench", approved_owners=["ops"], actor="bench")
    data = {"request_id": "R-0", "version": 1, "title": "Resume", "owner": "ops"}
    template = submit_event(workspace=workspace, source="api", raw={"action": "prepare-brief", "data": data}).operation
    columns = [f.column for f in Operation._meta.concrete_fields if not f.primary_key]
    chosen = [("key || ':' || g" if column == "key" else column) for column in columns]
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO ledger_operation ({', '.join(columns)}) "
            f"SELECT {', '.join(chosen)} FROM ledger_operation, generate_series(1, %s) g WHERE id = %s",
            [count - 1, template.pk],
        )
        cursor.execute("VACUUM ANALYZE ledger_operation")
    print(f"  loaded {count:,} pending operations in {time.perf_counter() - started:.1f} s", flush=True)


def pull(*, held: bool) -> str:
    """A global pause pulled an hour ago; with ``held``, over the operations (else over an action
    with none). Returns the action the switch is over ("" for all)."""
    from django.utils import timezone

    from ledger.models import Control
    from ledger.people.pause import set_paused

    action = "" if held else "no-such-action-held"
    set_paused(paused=True, actor="bench", reason="bench", action=action)
    Control.objects.filter(action=action, workspace=None).update(paused_since=timezone.now() - HELD_FOR)
    return action


def resume_now() -> tuple[float, tuple[int, int]]:
    from ledger.people.pause import set_paused

    action = pull(held=True)
    before = table_counts()
    started = time.perf_counter()
    set_paused(paused=False, actor="bench", action=action)
    ms = (time.perf_counter() - started) * 1000
    return ms, delta(before, table_counts())


def resume_empty() -> tuple[float, tuple[int, int]]:
    from ledger.people.pause import set_paused

    action = pull(held=False)
    started = time.perf_counter()
    set_paused(paused=False, actor="bench", action=action)
    return (time.perf_counter() - started) * 1000, (0, 0)


def resume_before() -> tuple[float, tuple[int, int]]:
    """What set_paused(paused=False) wrote before held time, for one action's held rows: the capped
    UPDATE and the crediting UPDATE (ledger.people.pause._credit_held_time as it was), rolled back."""
    from django.db import connection, transaction
    from django.utils import timezone

    from ledger.actions import get_action

    now = timezone.now()
    since, cap = now - HELD_FOR, now + get_action("prepare-brief").deadline
    before = table_counts()
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        where = "state IN ('pending', 'retrying') AND deadline > %s AND action = 'prepare-brief'"
        cursor.execute(
            f"UPDATE ledger_operation SET deadline = %s, updated_at = %s WHERE {where} AND deadline > %s",
            [cap, now, since, cap - HELD_FOR],
        )
        cursor.execute(
            f"UPDATE ledger_operation SET deadline = deadline + %s, updated_at = %s WHERE {where} AND deadline <= %s",
            [HELD_FOR, now, since, cap - HELD_FOR],
        )
        ms = (time.perf_counter() - started) * 1000
        transaction.set_rollback(True)
    return ms, delta(before, table_counts())


MEASURES = {"now": resume_now, "empty": resume_empty, "before": resume_before}


def claim_timed() -> float:
    """A claim of 100 due rows, each given its held time; then put back as they were."""
    from django.db import connection

    from ledger.engine.claiming import claim_due_operations

    started = time.perf_counter()
    claimed = claim_due_operations(limit=CLAIM, worker="bench")
    ms = (time.perf_counter() - started) * 1000
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_operation SET state = 'pending', lease_owner = '', lease_expires_at = NULL, "
            "state_changed_at = NULL, fencing_token = 0, attempts = 0 WHERE id = ANY(%s)",
            [[operation.pk for operation in claimed]],
        )
    return ms


def claim_without_intervals() -> float:
    """The same claim when no pause ended since the rows last moved (the function is not asked)."""
    from django.db import transaction

    from ledger.models import PauseInterval

    with transaction.atomic():
        kept = list(PauseInterval.objects.all())
        PauseInterval.objects.all().delete()
    try:
        return claim_timed()
    finally:
        PauseInterval.objects.bulk_create(kept)


CLAIMS = {"claim": claim_timed, "claim_plain": claim_without_intervals}


# --- counting -----------------------------------------------------------------------------------------


def table_counts() -> tuple[int, int]:
    """ledger_operation's updated rows since creation and its dead rows now, as the statistics
    collector has them after this backend's counts are flushed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        time.sleep(0.05)
        cursor.execute("SELECT n_tup_upd, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'ledger_operation'")
        return cursor.fetchone()


def delta(before: tuple[int, int], after: tuple[int, int]) -> tuple[int, int]:
    return after[0] - before[0], after[1] - before[1]


def report(figures: dict[str, list[float]], written: dict[str, list[tuple[int, int]]]) -> None:
    median = {name: statistics.median(values) for name, values in figures.items()}
    spread = {name: (min(values), max(values)) for name, values in figures.items()}

    def line(name: str, what: str) -> str:
        low, high = spread[name]
        return f"| {what} | {median[name]:.1f} ms ({low:.1f}-{high:.1f}) |"

    print()
    print(f"| resume, {OPERATIONS:,} held operations | median (spread) |")
    print("|---|---|")
    print(line("now", "a resume now (the switch, one interval, one audit event)"))
    print(line("empty", "the same resume holding nothing (baseline)"))
    print(line("before", "what a resume wrote before held time (UPDATE of every held row)"))
    print(line("claim", f"a claim of {CLAIM} after it, each given its held time"))
    print(line("claim_plain", f"a claim of {CLAIM} with no pause to give (baseline)"))
    ratios = [now / empty for now, empty in zip(figures["now"], figures["empty"], strict=True)]
    claims = [a / b for a, b in zip(figures["claim"], figures["claim_plain"], strict=True)]
    print()
    print(
        f"resume held / resume empty, per round: median {statistics.median(ratios):.2f} "
        f"({min(ratios):.2f}-{max(ratios):.2f}); goal: one statement's worth (about 1)"
    )
    print(f"before / now: {median['before'] / median['now']:.0f}x")
    print(
        f"claim with held time / plain claim: median {statistics.median(claims):.2f} "
        f"({min(claims):.2f}-{max(claims):.2f})"
    )
    for name, rows in written.items():
        updated = sorted({u for u, _ in rows})
        dead = sorted({d for _, d in rows})
        print(f"ledger_operation rows updated by {name!r} per resume: {updated}; dead tuples added: {dead}")


if __name__ == "__main__":
    main()
