"""Every bench script (bench/*.py) imports, and what the Makefile, bench/run.py and the scripts
themselves call it by exists: a rename, a module gone or a private name removed fails here, in the
normal test run, not minutes into a benchmark (``make bench-purge`` once imported a name of
ledger.retention that was gone, from inside a function, and broke only when it got there).

Nothing here runs a benchmark. The bench-only packages (requirements-bench.txt: pgqueuer, asyncpg,
uvloop, Powertools) are not installed by ``make test``: the scripts import them where they use them,
so every script imports without them; an import of theirs is checked only where the package is
installed."""

import ast
import importlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[1]
BENCH_DIR = PROJECT_DIR / "bench"
SCRIPTS = sorted(path.stem for path in BENCH_DIR.glob("*.py"))
BENCH_ONLY = {"pgqueuer", "asyncpg", "uvloop", "aws_lambda_powertools"}

# What each script is called by: `python bench/X.py` (its main, or what its __main__ block calls),
# bench/run.py's scenarios, gunicorn's app, or the names other scripts import from it (checked with
# every import below). Settings modules are used by name (DJANGO_SETTINGS_MODULE) and need none.
ENTRY_POINTS = {
    "claims_crash": ["run"],
    "compare": ["main"],
    "cpu": ["group_seconds", "process_seconds"],
    "crash_callers": ["main"],
    "drain": ["main", "noop", "ScratchDatabase"],
    "harness": ["prepare_environment", "run_in_scratch_database", "Rounds", "table_lines"],
    "idle_latency": ["main"],
    "lanes": ["main", "run"],
    "metrics_scrape": ["main"],
    "no_recycle_settings": [],
    "operation_writes": ["main"],
    "pgqueuer_worker": ["main", "create"],
    "plain_broker_settings": [],
    "powertools_server": ["app"],
    "profile_request": ["main"],
    "profiled_wsgi": ["application"],
    "purge": ["main"],
    "resume": ["main"],
    "retry_lateness": ["main"],
    "row_sizes": ["main"],
    "run": ["main"],
    "scale": ["main", "measure_purge"],
    "scale_costs": ["prepare_workspace", "measure", "compare"],
    "scenario_claims": ["scenario_claims"],
    "scenario_intake": ["scenario_intake", "scenario_batches"],
    "scenario_peers": ["scenario_http_intake"],
    "scenario_queue": ["scenario_queues"],
    "tenant_isolation": ["main"],
    "worker_memory": ["main"],
}


def _imports(path: Path):
    """Every ``import M`` and ``from M import N`` of a file, at any depth (in functions too)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
            for alias in node.names:
                yield node.lineno, node.module, alias.name


def _installed(module: str) -> bool:
    return _spec(module.partition(".")[0]) is not None


def _spec(dotted: str):
    """The module's spec, or None (also when a parent of the name is a module, not a package)."""
    try:
        return importlib.util.find_spec(dotted)
    except ModuleNotFoundError:
        return None


def test_every_script_has_its_entry_points_listed():
    assert sorted(ENTRY_POINTS) == SCRIPTS, "a bench script added or removed: list what calls it in ENTRY_POINTS"


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_imports_and_its_entry_points_are_callable(script):
    module = importlib.import_module(f"bench.{script}")

    for name in ENTRY_POINTS[script]:
        assert callable(getattr(module, name, None)), f"bench/{script}.py has no callable {name}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_name_the_script_imports_exists(script):
    """Imports inside functions too: they run only when a benchmark gets there."""
    missing = []
    for line, module_name, name in _imports(BENCH_DIR / f"{script}.py"):
        if module_name.partition(".")[0] in BENCH_ONLY and not _installed(module_name):
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            missing.append(f"line {line}: {module_name} ({error})")
            continue
        if name not in (None, "*") and not hasattr(module, name):
            if _spec(f"{module_name}.{name}") is None:
                missing.append(f"line {line}: {module_name}.{name}")
    assert missing == [], f"bench/{script}.py imports what does not exist: {missing}"


def test_the_scripts_the_makefile_runs_exist_and_have_their_entry_point():
    named = set(re.findall(r"\$\(PY\) bench/(\w+)\.py", (PROJECT_DIR / "Makefile").read_text()))

    assert named >= {"run", "purge", "scale"}  # the Makefile was read
    for script in named:
        assert script in ENTRY_POINTS, f"the Makefile runs bench/{script}.py, which is not there"
        assert ENTRY_POINTS[script], f"bench/{script}.py is run by the Makefile: name what it calls"


def test_the_modules_the_scripts_name_in_strings_exist():
    """gunicorn apps (``bench.x:app``), settings modules, ``python -m bench.x`` and django-q2 task paths."""
    referenced = set()
    for path in BENCH_DIR.glob("*.py"):
        referenced |= set(re.findall(r"""["'](bench\.[\w.]+(?::\w+)?)["']""", path.read_text()))

    assert "bench.powertools_server:app" in referenced  # the scripts were read
    for reference in sorted(referenced):
        dotted, _, attribute = reference.partition(":")
        if _spec(dotted) is not None:
            assert not attribute or callable(getattr(importlib.import_module(dotted), attribute, None)), reference
            continue
        module_name, _, name = dotted.rpartition(".")  # a function's dotted path (async_task)
        assert callable(getattr(importlib.import_module(module_name), name, None)), reference


# --- the load average beside each round's ratio (bench/harness.py) ----------------------------------


def _row(ratios_of_rounds, loads, *, every_round=False):
    from bench.harness import Row, Series

    return Row(
        "peers",
        "drain vs no-op",
        Series("drain", "op/s", [100.0 * ratio for ratio in ratios_of_rounds]),
        ">= 1.3",
        lambda r: r >= 1.3,
        baseline=Series("no-op", "op/s", [100.0] * len(ratios_of_rounds)),
        loads=loads,
        every_round=every_round,
    )


def test_a_round_above_twice_the_cores_is_left_out_of_the_median_and_marked(monkeypatch):
    from bench import harness

    monkeypatch.setattr(harness, "COMPARABLE_LOAD", 4)
    row = _row([1.5, 0.5, 1.4], [1.2, 6.5, 3.9])

    assert row.ratio == pytest.approx(1.45)  # the median of the two comparable rounds, not 1.4
    assert row.verdict == "yes"
    assert row.load_range == "1.2-3.9 (1 round > 4 left out)"
    table = "\n".join(harness.table_lines([row]))
    assert "1.2-3.9 (1 round > 4 left out)" in table


def test_every_rounds_ratio_is_printed_with_its_load(monkeypatch, capsys):
    from bench import harness

    monkeypatch.setattr(harness, "COMPARABLE_LOAD", 4)
    harness.print_details([_row([1.5, 0.5], [1.2, 6.5])])

    assert "ratios 1.5 (load 1.20), 0.5 (load 6.50, not comparable)" in capsys.readouterr().out


def test_every_round_means_every_comparable_round(monkeypatch):
    from bench import harness

    monkeypatch.setattr(harness, "COMPARABLE_LOAD", 4)

    assert _row([1.5, 1.2, 1.4], [1.0, 1.0, 1.0], every_round=True).verdict == "NO"  # the median 1.4 alone: yes
    assert _row([1.5, 1.2, 1.4], [1.0, 9.0, 1.0], every_round=True).verdict == "yes"
    assert _row([1.5, 1.2, 1.4], [1.0, 1.0, 1.0]).verdict == "yes"


def test_a_row_of_no_comparable_round_has_no_ratio_and_no_verdict(monkeypatch):
    from bench import harness

    monkeypatch.setattr(harness, "COMPARABLE_LOAD", 4)
    row = _row([1.5, 1.6], [8.0, 9.0])

    assert row.ratio is None
    assert row.verdict == "not comparable"
    assert row.load_range == "none comparable (2 rounds > 4 left out)"


def test_rows_without_loads_keep_every_round(monkeypatch):
    from bench import harness

    monkeypatch.setattr(harness, "COMPARABLE_LOAD", 4)
    row = _row([1.5, 0.5, 1.4], None)

    assert row.ratio == pytest.approx(1.4)
    assert row.load_range == "-"


def test_rounds_report_the_load_average_at_the_end_of_each_round(monkeypatch, capsys):
    from bench import harness

    readings = iter([0.5, 9.0])
    monkeypatch.setattr(harness, "load_average", lambda: next(readings))
    monkeypatch.setattr(harness, "COMPARABLE_LOAD", 4)

    loads = harness.Rounds(2).run([("a", lambda: None), ("b", lambda: None)], label="test")

    assert loads == [0.5, 9.0]
    out = capsys.readouterr().out
    assert "round 1/2 in " in out
    assert "load 0.50:" in out
    assert "load 9.00 (not comparable):" in out


def test_the_load_average_is_the_first_figure_of_proc_loadavg():
    from bench import harness

    def first_figure():
        return float(Path("/proc/loadavg").read_text().split()[0])

    before = first_figure()
    read = harness.load_average()
    after = first_figure()

    assert min(before, after) <= read <= max(before, after)


def test_bench_purge_refuses_a_comparison_too_small_to_slice_before_it_loads_anything():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / "purge.py")],
        env={"PURGE_COMPARE_OPERATIONS": "5000", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert "PURGE_COMPARE_OPERATIONS: at least 10,000, or 0 to skip the chunk sizes" in done.stderr


def test_compare_shows_a_row_without_a_comparable_round(tmp_path, capsys):
    from bench import compare

    def results(ratio):
        row = {
            "scenario": "peers",
            "name": "drain vs pgqueuer no-op",
            "unit": "operations/s",
            "median": 1500.0,
            "baseline": {"name": "no-op", "unit": "jobs/s", "median": 1000.0},
            "ratio": ratio,
            "loads": [9.0, 1.0],
            "target": ">= 1.3 every round",
            "met": "not comparable" if ratio is None else "yes",
        }
        return json.dumps({"machine": {"revision": "r", "date": "d"}, "rows": [row]})

    (tmp_path / "before.json").write_text(results(None))
    (tmp_path / "after.json").write_text(results(1.5))

    compare.main(str(tmp_path / "before.json"), str(tmp_path / "after.json"))

    assert "| not comparable | 1.5 (1.5e+03 / 1e+03) | yes |" in capsys.readouterr().out
