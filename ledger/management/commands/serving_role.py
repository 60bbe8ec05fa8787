"""The database role the app serves as: one that owns nothing, with only the grants it needs.

Whoever owns the tables (or is a superuser) can turn the audit trail's triggers off, TRUNCATE it and
replace its functions. The web and worker processes need none of that: they connect as a role made
here (run as the owner, after each ``migrate``, so new tables get their grants), which may read and
write the tables but only read and append audit events, use the sequences and call the functions.
``--check`` (``make serve``) refuses to serve as a superuser or as the owner of the audit table.
"""

import re

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from psycopg import sql

AUDIT_TABLE = "ledger_auditevent"

GRANTS = """
GRANT CONNECT ON DATABASE {database} TO {role};
GRANT USAGE ON SCHEMA public TO {role};
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
REVOKE UPDATE, DELETE ON ledger_auditevent FROM {role};
REVOKE INSERT, UPDATE, DELETE ON django_migrations FROM {role};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {role};
"""


class Command(BaseCommand):
    help = (
        "Create (or bring up to date) the role the app serves as: SELECT/INSERT/UPDATE/DELETE on the tables, "
        "SELECT and INSERT only on the audit table, USAGE on sequences, EXECUTE on functions; no ownership, "
        "no TRUNCATE, no superuser. Run as the database's owner after each migrate."
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
        with connection.cursor() as cursor:
            raw = cursor.connection
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role])
            found = cursor.fetchone()
            if found and found[0]:
                raise CommandError(f"{role} is a superuser: serve as a role that is not.")
            name = sql.Identifier(role)
            verb = "ALTER" if found else "CREATE"
            attributes = sql.SQL(" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS")
            statement = sql.SQL(verb + " ROLE {}").format(name) + attributes
            if password:
                statement += sql.SQL(" PASSWORD {}").format(sql.Literal(password))
            cursor.execute(statement.as_string(raw))
            cursor.execute("SELECT tableowner = %s FROM pg_tables WHERE tablename = %s", [role, AUDIT_TABLE])
            if (cursor.fetchone() or [False])[0]:
                raise CommandError(f"{role} owns {AUDIT_TABLE}: serve as a role that owns nothing.")
            cursor.execute(
                sql.SQL(GRANTS)
                .format(database=sql.Identifier(connection.settings_dict["NAME"]), role=name)
                .as_string(raw)
            )
        self.stdout.write(
            f"{'Updated' if found else 'Created'} role {role}: it may read and write the tables, "
            f"only read and append to {AUDIT_TABLE}, use the sequences, call the functions."
        )

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
