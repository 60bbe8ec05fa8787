"""What every scenario of ``bench/run.py`` shares: the environment, a scratch database, rounds that
interleave a subject with its baseline, and the table of medians and ratios.

Figures on a shared 2-core machine are noisy, so no scenario reports an absolute figure alone: each
subject is measured next to its baseline in the same run, round after round (the order rotated per
round, so neither always runs first), and the table shows the median of each over the rounds and the
median of the per-round ratios (subject ÷ the baseline of the same round).
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/opsconsole"
# A round that ended with the 1-minute load average above this is not comparable: the machine's other
# work, not ours or the peer's, decided its ratio (bench/README.md, "Load average").
COMPARABLE_LOAD = 2 * (os.cpu_count() or 1)


def load_average() -> float:
    """The 1-minute load average (/proc/loadavg); NaN where there is none."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def comparable(load: float) -> bool:
    return not load > COMPARABLE_LOAD  # NaN (no /proc/loadavg): not known to be loaded


def prepare_environment() -> None:
    """Import the project (not bench/ itself) and run as production would: DEBUG off.

    DEBUG would make this process keep every query it runs (Django's query log), which slows
    in-process intake and grows memory; a random SECRET_KEY is set instead (the clusters and
    gunicorn started here are given the same one, since django-q2 signs tasks with it).
    """
    bench_dir = str(Path(__file__).resolve().parent)
    sys.path[:] = [entry for entry in sys.path if entry != bench_dir]
    sys.path.insert(0, str(PROJECT_DIR))
    os.environ["DJANGO_SETTINGS_MODULE"] = "opsconsole.settings"
    os.environ["DEBUG"] = "0"
    os.environ.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(24))
    os.environ.setdefault("OPSCONSOLE_KEY_SECRET", "bench-" + secrets.token_hex(24))
    os.environ.setdefault("OPSCONSOLE_AUDIT_KEY", "bench-" + secrets.token_hex(24))
    os.environ.setdefault("LEDGER_LOG_LEVEL", "WARNING")
    # The stand-in the scenarios call listens on 127.0.0.1 (the egress policy, ledger.actions.egress).
    os.environ.setdefault("OPSCONSOLE_EGRESS_ALLOW_PRIVATE", "1")
    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@dataclass
class Series:
    """One measured quantity, one value per round."""

    name: str
    unit: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")


@dataclass
class Row:
    """A line of the final table: a subject against its baseline (a ratio), or a value alone."""

    scenario: str
    name: str
    subject: Series
    target: str
    met: Callable[[float], bool] | None  # applied to the ratio, or to the value when there is no baseline
    baseline: Series | None = None
    note: str = ""
    # The 1-minute load average at the end of each round, when the scenario keeps it (``peers``): a
    # round above COMPARABLE_LOAD is shown, marked, and left out of the median ratio and the verdict.
    loads: list[float] | None = None
    # The target must hold in every comparable round, not only for the median.
    every_round: bool = False

    @property
    def ratios(self) -> list[float]:
        if self.baseline is None:
            return []
        return [s / b if b else float("inf") for s, b in zip(self.subject.values, self.baseline.values, strict=True)]

    @property
    def comparable_ratios(self) -> list[float]:
        if self.loads is None:
            return self.ratios
        return [ratio for ratio, load in zip(self.ratios, self.loads, strict=True) if comparable(load)]

    @property
    def ratio(self) -> float | None:
        ratios = self.comparable_ratios
        return statistics.median(ratios) if self.baseline is not None and ratios else None

    @property
    def load_range(self) -> str:
        """The comparable rounds' load averages, and how many were left out."""
        if self.loads is None:
            return "-"
        kept = [load for load in self.loads if comparable(load)]
        shown = f"{min(kept):.1f}-{max(kept):.1f}" if kept else "none comparable"
        left_out = len(self.loads) - len(kept)
        return shown + (
            f" ({left_out} round{'s' if left_out > 1 else ''} > {COMPARABLE_LOAD} left out)" if left_out else ""
        )

    @property
    def figure(self) -> float:
        """What the target is checked against: the ratio, or the value itself."""
        return self.ratio if self.baseline is not None else self.subject.median

    @property
    def verdict(self) -> str:
        if self.met is None:
            return "-"
        if self.baseline is not None and self.ratio is None:
            return "not comparable"
        if self.every_round:
            return "yes" if all(self.met(ratio) for ratio in self.comparable_ratios) else "NO"
        return "yes" if self.met(self.figure) else "NO"


class Rounds:
    """Runs named measurements in interleaved rounds: round r runs them in the order rotated by r."""

    def __init__(self, rounds: int):
        if rounds < 1:
            raise ValueError("at least one round")
        self.rounds = rounds

    def run(self, steps: list[tuple[str, Callable[[], None]]], *, label: str) -> list[float]:
        """Returns the 1-minute load average at the end of each round."""
        loads = []
        for number in range(self.rounds):
            shift = number % len(steps)
            order = steps[shift:] + steps[:shift]
            began = time.monotonic()
            took = []
            for name, step in order:
                step_began = time.monotonic()
                step()
                took.append(f"{name} {time.monotonic() - step_began:.1f} s")
            loads.append(load_average())
            print(
                f"  {label}: round {number + 1}/{self.rounds} in {time.monotonic() - began:.1f} s, "
                f"load {loads[-1]:.2f}{'' if comparable(loads[-1]) else ' (not comparable)'}: {'; '.join(took)}",
                flush=True,
            )
        return loads


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


# A measurement of one-at-a-time calls stops after its count or after this many seconds, whichever
# comes first (the rate is what was done over the time it took), so a loaded machine makes the run
# no longer, only the sample smaller.
BUDGET_SECONDS = float(os.environ.get("BENCH_SECONDS", "4"))
MIN_CALLS = 50


def timed_calls(items: list, call: Callable, *, budget: float = BUDGET_SECONDS) -> tuple[int, float]:
    """Call ``call(item)`` for the items one after another; stop early once ``budget`` seconds have
    passed (after at least ``MIN_CALLS``). Returns (calls made, seconds taken)."""
    started = time.perf_counter()
    done = 0
    for item in items:
        call(item)
        done += 1
        if done >= MIN_CALLS and time.perf_counter() - started > budget:
            break
    return done, time.perf_counter() - started


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value != value:  # NaN
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if value else "0"


def print_details(rows: list[Row]) -> None:
    print("\nEvery round (values in round order):")
    for row in rows:
        line = f"  [{row.scenario}] {row.name}: {', '.join(fmt(v) for v in row.subject.values)} {row.subject.unit}"
        if row.baseline is not None:
            line += (
                f"; baseline {row.baseline.name}: {', '.join(fmt(v) for v in row.baseline.values)} "
                f"{row.baseline.unit}; ratios {', '.join(_with_load(r, row, n) for n, r in enumerate(row.ratios))}"
            )
        if row.note:
            line += f" ({row.note})"
        print(line)


def _with_load(ratio: float, row: Row, number: int) -> str:
    if row.loads is None:
        return f"{ratio:.3g}"
    load = row.loads[number]
    return f"{ratio:.3g} (load {load:.2f}{'' if comparable(load) else ', not comparable'})"


def table_lines(rows: list[Row], *, markdown: bool = False) -> list[str]:
    header = ["#", "scenario", "median", "baseline", "baseline median", "ratio", "load (1 min)", "target", "met?"]
    body = []
    for row in rows:
        body.append(
            [
                row.scenario,
                f"{row.name} ({row.subject.unit})",
                fmt(row.subject.median),
                row.baseline.name if row.baseline is not None else "-",
                fmt(row.baseline.median) if row.baseline is not None else "-",
                f"{row.ratio:.3g}" if row.ratio is not None else "-",
                row.load_range,
                row.target,
                row.verdict,
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return lines
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(len(header))]
    right = {2, 4, 5}

    def line(cells):
        return "  ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(cells))

    return [line(header), "  ".join("-" * width for width in widths)] + [line(cells) for cells in body]


def run_in_scratch_database(
    kind: str, run: Callable[[str], None], *, keep: bool, extra_env: dict | None = None
) -> None:
    """The frame of a PostgreSQL-only bench that loads its own data (bench-purge, bench-scrape):
    DEBUG off (it would keep every query), a scratch database beside ``DATABASE_URL`` (never that
    one), ``run(label)`` against it, then the scratch database dropped unless ``keep``."""
    import tempfile

    project = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(project))
    os.environ["DJANGO_SETTINGS_MODULE"] = "opsconsole.settings"
    os.environ.setdefault("SECRET_KEY", f"bench-{kind}-only-not-a-secret")
    os.environ.setdefault("OPSCONSOLE_KEY_SECRET", f"bench-{kind}-only-not-a-secret")
    os.environ.setdefault("OPSCONSOLE_AUDIT_KEY", f"bench-{kind}-only-not-a-secret")
    os.environ.setdefault("LEDGER_LOG_LEVEL", "WARNING")
    # The stand-in the scenarios call listens on 127.0.0.1 (the egress policy, ledger.actions.egress).
    os.environ.setdefault("OPSCONSOLE_EGRESS_ALLOW_PRIVATE", "1")
    os.environ.update(extra_env or {})
    os.environ["DEBUG"] = "0"
    import environ

    url = os.environ.get("DATABASE_URL", "")
    if not url or environ.Env.db_url_config(url)["ENGINE"] != "django.db.backends.postgresql":
        sys.exit(f"bench-{kind} needs PostgreSQL: DATABASE_URL=postgres://user@host:port/name make bench-{kind}")
    from bench.drain import ScratchDatabase

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"opsconsole-{kind}-") as scratch_dir:
        scratch = ScratchDatabase(url, Path(scratch_dir), prefix=kind)
        os.environ["DATABASE_URL"] = scratch.url
        try:
            run(scratch.label)
        finally:
            if keep:
                from django.db import connections

                connections.close_all()
                print(f'kept {scratch.name} ({kind.upper()}_KEEP=1); drop it with: DROP DATABASE "{scratch.name}"')
            else:
                scratch.drop()
    print(f"total run time: {time.perf_counter() - started:.0f} s")


def prepare_bare_tables(observer, template_operation_id: int) -> None:
    """The bare service's table (ledger_operation's shape) and its one-row template, a real operation."""
    observer.execute("DROP TABLE IF EXISTS bench_bare_operation, bench_bare_template")
    observer.execute("CREATE TABLE bench_bare_operation (LIKE ledger_operation INCLUDING ALL)")
    observer.execute(
        "CREATE TABLE bench_bare_template AS SELECT * FROM ledger_operation WHERE id = %s", [template_operation_id]
    )
