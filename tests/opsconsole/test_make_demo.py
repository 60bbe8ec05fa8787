"""`make demo` and `make demo-day` run on their own embedded PostgreSQL whatever DATABASE_URL says,
and `make test` still on DATABASE_URL's (CI and the helpers rely on it), in parallel; `make test-fast`
and `make test ROOM=...` run the tests they name. The Makefile's recipes are
run for real by make, with a stand-in interpreter (VENV=...) that records each command and the
database it was given instead of running it: the database server is not started, nothing is served."""

import os
import subprocess
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
EMBEDDED = "postgres://postgres@127.0.0.1:59999/opsconsole"
THEIRS = "postgres://me@db.internal:5432/production"
FAKE_PYTHON = f"""#!/bin/bash
echo "$DATABASE_URL | $*" >> "$(dirname "$0")/calls"
[ "$*" = "-m opsconsole.embedded_db start" ] && echo {EMBEDDED}
# The server, last, waits (5 s at most) for the cluster started in the background to be recorded:
# when it returns, the recipe's trap stops the cluster, perhaps before it has said anything.
if [[ "$*" == "manage.py runserver"* ]]; then
    for _ in $(seq 50); do grep -q "manage.py qcluster" "$(dirname "$0")/calls" && break; sleep 0.1; done
fi
exit 0
"""


@pytest.fixture
def fake_venv(tmp_path):
    if subprocess.run(["make", "--version"], capture_output=True).returncode != 0:
        pytest.skip("needs make")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    (tmp_path / "venv" / ".installed").touch()  # newer than the requirements: `venv` has nothing to do
    return tmp_path / "venv"


def make(target: str, venv: Path, **env) -> tuple[str, list[tuple[str, str]]]:
    """Runs `make target` with the stand-in interpreter; its output and the (database, command) calls."""
    # Not the variables of a make this runs under (a developer's `make test PYTEST_ARGS=...`).
    inherited = ("DATABASE_URL", "PYTEST_ARGS", "ROOM", "TEST_WORKERS")
    environment = {k: v for k, v in os.environ.items() if k not in inherited and not k.startswith("MAKE")} | env
    done = subprocess.run(
        ["make", "--no-print-directory", target, f"VENV={venv}"],
        cwd=CHECKOUT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (venv / "bin" / "calls").read_text().splitlines() if (venv / "bin" / "calls").exists() else []
    return done.stdout, [tuple(line.split(" | ", 1)) for line in lines]


def test_make_demo_ignores_database_url_and_runs_every_step_on_the_embedded_server(fake_venv):
    printed, calls = make("demo", fake_venv, DATABASE_URL=THEIRS)

    assert "DATABASE_URL is not used: the demo runs on its own embedded PostgreSQL" in printed
    manage = [(database, command) for database, command in calls if command.startswith("manage.py")]
    # In this order, the qcluster started in the background beside them (its line lands when it does).
    steps = [command.split()[1] for _, command in manage]
    assert [step for step in steps if step != "qcluster"] == ["migrate", "demo_setup", "demo_drafts", "runserver"]
    assert "qcluster" in steps
    assert {database for database, _ in manage} == {EMBEDDED}
    assert calls[-1][1] == "-m opsconsole.embedded_db stop"  # and stopped when it ends
    # The stand-in keeps its records beside the database; the logs go to files in var/.
    assert "-m standin --port 8765 --store var/standin.sqlite3" in [command for _, command in calls]
    assert "Logs: var/commands.log, var/qcluster.log, var/standin.log, var/web.log." in printed


def test_make_demo_prints_the_summary_last_and_deletes_it(fake_venv):
    """What demo_setup (and demo_day) wrote to var/demo-summary.txt is the last thing printed, before
    the server's own line; the file, which holds the token, is gone after."""
    summary = CHECKOUT / "var" / "demo-summary.txt"
    writes_summary = (
        '[[ "$*" == *"demo_setup"* ]] && '
        'printf "Console:  http://x/console/\\nAPI token for workspace demo: oc_t\\n" > var/demo-summary.txt\n'
    )
    (fake_venv / "bin" / "python").write_text(FAKE_PYTHON.replace("exit 0\n", writes_summary + "exit 0\n"))

    printed, _ = make("demo", fake_venv)

    after_setup = printed.split("Ctrl-C stops the demo.\n", 1)[1].splitlines()
    token = after_setup.index("API token for workspace demo: oc_t")
    assert after_setup[token - 1] == "Console:  http://x/console/"
    # Then only the server's line (here the stand-in interpreter's runserver, which ends at once).
    assert after_setup[token + 1].startswith("The web server stopped (status 0)"), printed
    assert not summary.exists()


def test_make_demo_without_database_url_says_nothing_of_it(fake_venv):
    printed, calls = make("demo", fake_venv)

    assert "DATABASE_URL is not used" not in printed
    assert {database for database, command in calls if command.startswith("manage.py")} == {EMBEDDED}


def test_make_demo_day_plays_the_day_before_serving(fake_venv):
    printed, calls = make("demo-day", fake_venv, DATABASE_URL=THEIRS, EVENTS="50")

    commands = [command for _, command in calls if command.startswith("manage.py") and "qcluster" not in command]
    assert commands[1:] == [
        "manage.py demo_setup --url http://127.0.0.1:8000/ --summary var/demo-summary.txt",
        "manage.py demo_day --events 50 --summary var/demo-summary.txt",
        "manage.py demo_drafts",
        "manage.py runserver --noreload 127.0.0.1:8000",
    ]
    assert "manage.py qcluster" in [command for _, command in calls]
    assert {database for database, command in calls if command.startswith("manage.py")} == {EMBEDDED}


PARALLEL = "-m pytest -n 3 --dist loadfile"


def test_make_test_still_runs_on_database_url(fake_venv):
    _, calls = make("test", fake_venv, DATABASE_URL=THEIRS)

    assert calls == [(THEIRS, PARALLEL)]  # no embedded server started


def test_make_test_fast_leaves_out_processes_browsers_and_slow_tests_and_keeps_the_test_databases(fake_venv):
    _, calls = make("test-fast", fake_venv, DATABASE_URL=THEIRS)

    assert calls == [(THEIRS, f"{PARALLEL} -m not processes and not e2e and not slow --reuse-db")]


@pytest.mark.parametrize(
    ("room", "folder"),
    [("engine", "tests/ledger/engine/"), ("integrations", "tests/ledger/integrations/"), ("console", "tests/console/")],
)
def test_make_test_room_runs_the_rooms_folder(fake_venv, room, folder):
    _, calls = make("test", fake_venv, DATABASE_URL=THEIRS, ROOM=room)

    assert calls == [(THEIRS, f"{PARALLEL} {folder}")]
