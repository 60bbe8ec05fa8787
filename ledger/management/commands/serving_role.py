"""The database role the app serves as: one that owns nothing, with only the grants it needs.

Whoever owns the tables (or is a superuser) can turn the audit trail's triggers off, TRUNCATE it and
replace its functions. The web and worker processes need none of that: they connect as a role made
here (run as the owner, after each ``migrate``, so new tables get their grants), which may read and
write the tables but only read and append audit events, use the sequences and call the functions.
``--check`` (``make serve``) refuses to serve as a superuser or as the owner of the audit table.

Who may run it: the tables' owner, a superuser or not. Making the role, or changing its password
or attributes, takes CREATEROLE (on PostgreSQL 16+ changing a role also takes ADMIN OPTION on it,
which the role that made it has); granting takes owning the tables. An attribute is only written
where it differs from what the role must have: PostgreSQL refuses a non-superuser even a
``NOSUPERUSER`` that changes nothing.
"""

import re

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection, transaction
from psycopg import errors, sql

AUDIT_TABLE = "ledger_auditevent"

# The role's attributes in pg_roles, and whether it must have each (SUPERUSER is refused before).
ATTRIBUTES = {
    "rolcanlogin": ("LOGIN", True),
    "rolcreatedb": ("CREATEDB", False),
    "rolcreaterole": ("CREATEROLE", False),
    "rolreplication": ("REPLICATION", False),
    "rolbypassrls": ("BYPASSRLS", False),
}

GRANTS = """
GRANT CONNECT ON DATABASE {database} TO {role};
GRANT USAGE ON SCHEMA public TO {role};
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
REVOKE UPDATE, DELETE ON ledger_auditevent FROM {role};
REVOKE INSERT, UPDATE, DELETE ON ledger_auditinstallation FROM {role};
REVOKE INSERT, UPDATE, DELETE ON ledger_auditarchive FROM {role};
REVOKE INSERT, UPDATE, DELETE ON django_migrations FROM {role};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {role};
DO $partitions$
DECLARE
    part regclass;
BEGIN
    -- Partitions are reached through their tables, whose grants hold for them: none of their own
    -- (ALL TABLES above gave the audit trail's the other tables' writes).
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent
                IN ('ledger_auditevent'::regclass, 'ledger_delivery'::regclass, 'ledger_attempt'::regclass) LOOP
        EXECUTE format('REVOKE ALL ON %s FROM {role}', part);
    END LOOP;
END
$partitions$;
"""


class Command(BaseCommand):
    help = (
        "Create (or bring up to date) the role the app serves as: SELECT/INSERT/UPDATE/DELETE on the tables, "
        "SELECT and INSERT only on the audit table (SELECT only on its installation record), USAGE on sequences, "
        "EXECUTE on functions; no ownership, no TRUNCATE, no superuser. Run as the database's owner after each migrate."
    )

    def add_arguments(self, parser):
        parser.add_argument("role", nargs="?", help="the serving role's name (made if missing)")
        parser.add_argument("--password", help="set (or change) its password; else it keeps the one it has")
        parser.add_argument(
            "--check",
            action="store_true",
            help="instead: fail unless this process is connected as such a role (make serve)",
        )

    def handle(self, *args, role=None, password=None, check=False, **options):
        if check:
            return self.check_serving()
        if not role or not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", role):
            raise CommandError("Name the role: lower-case letters, digits and '_' (e.g. opsconsole_app).")
        # One transaction: a refusal half-way leaves neither the role nor some of its grants.
        with transaction.atomic(), connection.cursor() as cursor:
            raw = cursor.connection
            owner = self.owner_running(cursor)
            cursor.execute(f"SELECT rolsuper, {', '.join(ATTRIBUTES)} FROM pg_roles WHERE rolname = %s", [role])
            found = cursor.fetchone()
            if found and found[0]:
                raise CommandError(f"{role} is a superuser: serve as a role that is not.")
            if owner == role:
                raise CommandError(f"{role} owns {AUDIT_TABLE}: serve as a role that owns nothing.")
            name = sql.Identifier(role)
            statement = self.role_statement(name, found, password)
            if statement is not None:
                self.execute_as_allowed(cursor, statement.as_string(raw), role=role, owner=owner, creating=not found)
            cursor.execute(
                sql.SQL(GRANTS)
                .format(database=sql.Identifier(connection.settings_dict["NAME"]), role=name)
                .as_string(raw)
            )
        self.stdout.write(
            f"{'Updated' if found else 'Created'} role {role}: it may read and write the tables, "
            f"only read and append to {AUDIT_TABLE}, use the sequences, call the functions."
        )

    @staticmethod
    def owner_running(cursor) -> str:
        """The tables' owner, once sure that this connection may grant on them: as their owner (or
        a role with its privileges) or a superuser; anyone else's grants would silently grant nothing."""
        cursor.execute(
            "SELECT current_user, tableowner, pg_has_role(tableowner, 'USAGE') FROM pg_tables WHERE tablename = %s",
            [AUDIT_TABLE],
        )
        user, owner, may_grant = cursor.fetchone() or (None, None, False)
        if owner is None:
            raise CommandError(f"There is no {AUDIT_TABLE} to grant on: run `manage.py migrate` first.")
        if not may_grant:
            raise CommandError(f"Run it as {owner}, the owner of the tables, or as a superuser: {user} is neither.")
        return owner

    @staticmethod
    def role_statement(name: sql.Identifier, found: tuple | None, password: str | None) -> sql.Composed | None:
        """CREATE ROLE (the defaults are NO-everything but LOGIN), or ALTER ROLE with only the
        attributes that differ and the password; None when there is nothing to change."""
        current = dict(zip(ATTRIBUTES, found[1:], strict=True)) if found else {}
        wrong = [
            keyword if wanted else f"NO{keyword}"
            for column, (keyword, wanted) in ATTRIBUTES.items()
            if current.get(column, False) != wanted
        ]
        if found and not wrong and not password:
            return None
        statement = sql.SQL(("ALTER" if found else "CREATE") + " ROLE {} " + " ".join(wrong)).format(name)
        if password:
            statement += sql.SQL(" PASSWORD {}").format(sql.Literal(password))
        return statement

    @staticmethod
    def execute_as_allowed(cursor, statement: str, *, role: str, owner: str, creating: bool) -> None:
        """Run the CREATE or ALTER ROLE; refused for want of a privilege, say who may run it."""
        try:
            cursor.execute(statement)
        except DatabaseError as error:
            if not isinstance(error.__cause__, errors.InsufficientPrivilege):
                raise
            needs = "CREATEROLE" if creating else f"CREATEROLE (on PostgreSQL 16+ also ADMIN OPTION on {role})"
            reason = " ".join(str(error).split())
            raise CommandError(
                f"Could not {'create' if creating else 'change'} role {role} ({reason}). Run it as a superuser, "
                f"or as {owner} (the owner of the tables) with {needs}."
            ) from None

    def check_serving(self):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_user, rolsuper OR rolbypassrls, (SELECT tableowner FROM pg_tables "
                "WHERE tablename = %s) FROM pg_roles WHERE rolname = current_user",
                [AUDIT_TABLE],
            )
            user, privileged, owner = cursor.fetchone()
        if privileged or owner == user:
            raise CommandError(
                f"Not serving as {user}: it {'is a superuser' if privileged else 'owns the tables'}, "
                "so it could turn the audit trail's triggers off. Serve as the role `manage.py "
                "serving_role` makes (docs/operations.md, The serving role)."
            )
        self.stdout.write(f"Serving as {user}: not a superuser, owns no audit table.")
