"""Every function and trigger the migrations leave in the database has one ``.sql`` file, beside the
code that calls it (``ledger/intake/sql/reserve.sql`` is ``ledger_reserve``), holding what the
database holds (docs/architecture.md, "Where the SQL lives").

The migrations keep their own copies, frozen as each was applied; these files are the current
truth in one place, and this test is what keeps them true. A file is a header of ``--`` lines, a
blank line, then the definition exactly as ``pg_get_functiondef`` or ``pg_get_triggerdef`` returns
it, ended by ``;`` and a newline. The comparison is plain text: nothing is normalised but the
header and that ending, so a changed space is a difference too (copy the database's text when a
migration changes a function).

The name of the file follows from the object's, without ``ledger_``: ``reserve.sql`` for the
function ``ledger_reserve``, ``announce_task.trigger.sql`` for the trigger ``ledger_announce_task``.
"""

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

# The project's Python packages: every .sql file in them is the source of one database object.
PACKAGES = ("ledger", "reconciliation", "opsconsole")
FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION public\.(\w+)\(")
TRIGGER = re.compile(r"CREATE TRIGGER (\w+) ")

# The functions the migrations made (in the public schema, not an extension's) and the triggers
# (not those PostgreSQL makes for foreign keys, nor those of a partition, which are its partitioned
# table's: tests/ledger/core/test_audit_partitions.py holds them), each with the text the database
# would recreate it by.
DATABASE_FUNCTIONS = """
    SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'public' AND p.prokind IN ('f', 'p') AND NOT EXISTS (
        SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
"""
DATABASE_TRIGGERS = """
    SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE NOT t.tgisinternal AND NOT c.relispartition
"""


@dataclass(frozen=True)
class Source:
    """One .sql file: the object it defines, as ("function" | "trigger", name), and its definition."""

    path: Path
    kind: str
    name: str
    definition: str

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.name


def file_name(kind: str, name: str) -> str:
    suffix = ".trigger.sql" if kind == "trigger" else ".sql"
    return name.removeprefix("ledger_") + suffix


def read_source(path: Path) -> Source:
    """The object ``path`` defines, refused unless the file has the one shape the comparison reads."""
    header, _, body = path.read_text().partition("\n\n")
    if not header or not all(line.startswith("--") for line in header.splitlines()):
        raise ValueError(
            f"{path}: expected a header of '--' lines saying what it is for and who calls it, "
            "then a blank line, then the definition"
        )
    if not body.endswith(";\n"):
        raise ValueError(f"{path}: expected the definition to end with ';' and a newline")
    definition = body.removesuffix(";\n")
    for kind, pattern in (("function", FUNCTION), ("trigger", TRIGGER)):
        if found := pattern.match(definition):
            source = Source(path, kind, found.group(1), definition)
            if path.name != file_name(kind, source.name):
                raise ValueError(f"{path}: defines {kind} {source.name}, so is named {file_name(kind, source.name)}")
            return source
    raise ValueError(f"{path}: expected 'CREATE OR REPLACE FUNCTION public.<name>(' or 'CREATE TRIGGER <name> '")


def sources_in(paths) -> dict[tuple[str, str], Source]:
    sources = {}
    for path in sorted(paths):
        source = read_source(path)
        if source.key in sources:
            raise ValueError(f"{source.kind} {source.name} is defined by both {sources[source.key].path} and {path}")
        sources[source.key] = source
    return sources


def project_sql_files() -> list[Path]:
    return [path for package in PACKAGES for path in (Path(settings.BASE_DIR) / package).rglob("*.sql")]


def database_definitions() -> dict[tuple[str, str], str]:
    """What the database holds, by ("function" | "trigger", name), less the final newline of
    ``pg_get_functiondef`` (a file's own ending is ';' and a newline)."""
    definitions = {}
    with connection.cursor() as cursor:
        for kind, query in (("function", DATABASE_FUNCTIONS), ("trigger", DATABASE_TRIGGERS)):
            cursor.execute(query)
            for name, definition in cursor.fetchall():
                assert (kind, name) not in definitions, f"two {kind}s named {name}: one file each needs a naming rule"
                definitions[kind, name] = definition.rstrip("\n")
    return definitions


def disagreements(database: dict[tuple[str, str], str], sources: dict[tuple[str, str], Source]) -> list[str]:
    """Each way the files and the database differ, said so a person knows which file to write."""
    found = []
    for kind, name in sorted(database.keys() - sources.keys()):
        found.append(
            f"{kind} {name} is in the database but has no file: write {file_name(kind, name)} beside the "
            f"code that calls it, its header then the database's text"
        )
    for key in sorted(sources.keys() - database.keys()):
        source = sources[key]
        found.append(f"{source.path} defines {source.kind} {source.name}, which the migrations do not make")
    for key in sorted(sources.keys() & database.keys()):
        source = sources[key]
        if source.definition != database[key]:
            diff = difflib.unified_diff(
                source.definition.splitlines(),
                database[key].splitlines(),
                str(source.path),
                "the database",
                lineterm="",
            )
            found.append(f"{source.path} differs from the database's {source.kind} {source.name}:\n" + "\n".join(diff))
    return found


@pytest.fixture
def postgresql(db):
    """The migrated test database, whose functions and triggers the files must match."""


def test_each_function_and_trigger_is_its_file(postgresql):
    """The migrated test database holds exactly what the files say, object for object."""
    sources = sources_in(project_sql_files())

    found = disagreements(database_definitions(), sources)
    assert not found, "\n\n".join(found)
    assert {kind for kind, _ in sources} == {"function", "trigger"}


def test_a_function_without_a_file_is_named(postgresql):
    with connection.cursor() as cursor:
        cursor.execute("CREATE FUNCTION ledger_stray() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$")

    found = disagreements(database_definitions(), sources_in(project_sql_files()))

    assert found == [
        "function ledger_stray is in the database but has no file: write stray.sql beside the code "
        "that calls it, its header then the database's text"
    ]


def test_a_trigger_without_a_file_is_named(postgresql):
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TRIGGER ledger_stray BEFORE TRUNCATE ON ledger_wakeup "
            "FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate()"
        )

    found = disagreements(database_definitions(), sources_in(project_sql_files()))

    assert found == [
        "trigger ledger_stray is in the database but has no file: write stray.trigger.sql beside the "
        "code that calls it, its header then the database's text"
    ]


def test_a_file_without_its_function_is_named(postgresql, tmp_path):
    gone = tmp_path / "gone.sql"
    gone.write_text(
        "-- Dropped by a migration, its file left behind.\n\n"
        "CREATE OR REPLACE FUNCTION public.ledger_gone()\n RETURNS integer\n LANGUAGE sql\n"
        "AS $function$ SELECT 1 $function$;\n"
    )

    found = disagreements(database_definitions(), sources_in([*project_sql_files(), gone]))

    assert found == [f"{gone} defines function ledger_gone, which the migrations do not make"]


def test_a_function_changed_without_its_file_is_named_with_the_difference(postgresql):
    """As a migration that changed ``ledger_take_wakeup`` and forgot its file would leave it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION ledger_take_wakeup(at timestamptz) RETURNS boolean "
            "LANGUAGE plpgsql AS $$ BEGIN RETURN true; END $$"
        )

    [found] = disagreements(database_definitions(), sources_in(project_sql_files()))

    assert found.startswith(
        f"{settings.BASE_DIR / 'ledger/core/sql/take_wakeup.sql'} differs from the "
        "database's function ledger_take_wakeup:\n"
    )
    assert "\n+AS $function$ BEGIN RETURN true; END $function$" in found
    assert "\n-    PERFORM 1 FROM ledger_wakeup WHERE name = 'process' FOR KEY SHARE;" in found


def test_a_file_changed_by_a_space_is_named(postgresql, tmp_path):
    original = settings.BASE_DIR / "ledger/engine/sql/announce_task.trigger.sql"
    edited = tmp_path / "announce_task.trigger.sql"
    edited.write_text(original.read_text().replace("AFTER INSERT", "AFTER  INSERT"))
    sources = sources_in(project_sql_files())
    sources["trigger", "ledger_announce_task"] = read_source(edited)

    [found] = disagreements(database_definitions(), sources)

    assert found.startswith(f"{edited} differs from the database's trigger ledger_announce_task:\n")


@pytest.mark.parametrize(
    ("name", "text", "refusal"),
    [
        (
            "reserve.sql",
            "CREATE OR REPLACE FUNCTION public.ledger_reserve(request jsonb)\n$function$;\n",
            "a header of '--'",
        ),
        (
            "reserve.sql",
            "-- Reserves.\n\nCREATE OR REPLACE FUNCTION public.ledger_reserve(request jsonb)\n$function$\n",
            "end with ';'",
        ),
        (
            "reserve.sql",
            "-- Reserves.\n\nCREATE FUNCTION ledger_reserve(request jsonb);\n",
            "expected 'CREATE OR REPLACE",
        ),
        (
            "intake.sql",
            "-- Reserves.\n\nCREATE OR REPLACE FUNCTION public.ledger_reserve(request jsonb);\n",
            "so is named reserve.sql",
        ),
        (
            "announce_task.sql",
            "-- Announces.\n\nCREATE TRIGGER ledger_announce_task AFTER INSERT;\n",
            "so is named announce_task.trigger.sql",
        ),
    ],
)
def test_a_file_of_another_shape_is_refused(tmp_path, name, text, refusal):
    path = tmp_path / name
    path.write_text(text)

    with pytest.raises(ValueError, match=re.escape(refusal)):
        read_source(path)


def test_two_files_of_one_object_are_refused(tmp_path):
    text = "-- Reserves.\n\nCREATE OR REPLACE FUNCTION public.ledger_reserve(request jsonb);\n"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "reserve.sql").write_text(text)
    (tmp_path / "b" / "reserve.sql").write_text(text)

    with pytest.raises(ValueError, match="function ledger_reserve is defined by both"):
        sources_in(tmp_path.rglob("*.sql"))
