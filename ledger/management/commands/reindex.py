from django.core.management.base import BaseCommand, CommandError

from ledger import reindex


class Command(BaseCommand):
    help = (
        "Rebuild, one at a time with REINDEX INDEX CONCURRENTLY, the indexes of the tables a purge deletes from "
        "that are well above what their rows need (ledger/reindex.py says the rule), after dropping the INVALID "
        "leftovers of a rebuild that failed. Runs weekly on the worker cluster too; two runs never overlap."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="List each index, its size and what it needs; change nothing."
        )
        parser.add_argument(
            "--min-waste-mb",
            type=int,
            default=reindex.MIN_WASTE // 1024 // 1024,
            help="Rebuild only an index wasting at least this many MB (default %(default)s).",
        )

    def handle(self, *args, dry_run, min_waste_mb, **options):
        if min_waste_mb < 0:
            raise CommandError("--min-waste-mb cannot be negative.")
        report = reindex.reindex(dry_run=dry_run, min_waste=min_waste_mb * 1024 * 1024, progress=self.stdout.write)
        if report.busy:
            raise CommandError("Another reindex is running (it holds the advisory lock): nothing done.")
