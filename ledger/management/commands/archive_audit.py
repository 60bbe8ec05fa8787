from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from ledger.core.audit_archive import ArchiveRefused, archive_oldest


class Command(BaseCommand):
    help = (
        "Take the audit trail's oldest month out to a file: its events are checked (links and MACs) as "
        "they are written to DIRECTORY/<partition>.jsonl, the file is synced, then the archive is recorded "
        "and the month's partition dropped, in one transaction. Oldest first, and only a month that has "
        "ended. Run as the tables' owner (MIGRATE_DATABASE_URL's role). Keep the file where the database's "
        "owner cannot change it; `verify_audit --archive FILE` checks it on its own."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory", help="where the archive file is written (it must exist)")
        parser.add_argument(
            "--partition", default="", help="the partition expected to be the oldest (refused if it is not)"
        )

    def handle(self, *args, directory, partition="", **options):
        try:
            archived = archive_oldest(Path(directory), partition=partition)
        except ArchiveRefused as refused:
            raise CommandError(f"Not archived: {refused}.") from refused
        except DatabaseError as error:
            raise CommandError(f"Not archived, nothing changed: {str(error).strip()}") from error
        self.stdout.write(
            f"Archived {archived.partition}: {archived.events} events in {len(archived.chains)} chain(s) to "
            f"{archived.path}; the partition is dropped. Keep the file where the database's owner cannot reach it."
        )
