from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ledger.core.audit_heads import check_heads
from ledger.core.audit_verify import BrokenArchiveRecord, archived_chains, verify_chains, verify_files
from ledger.models import AuditEvent, Workspace

UNCHECKED = (
    "WARNING: --no-heads: the chains were checked against themselves only. NOT checked: events cut off "
    "the end of a chain, a chain deleted whole, the installation's keying date, and a chain made up since "
    "the last export. Export heads (manage.py export_audit_heads) and verify without --no-heads."
)


class Command(BaseCommand):
    help = (
        "Check that no audit event was changed, removed or inserted since it was written: recomputes every "
        "event's MAC in this process (no key reaches the database) along each chain, holds the database to "
        "the last exported heads (--heads FILE, else OPSCONSOLE_AUDIT_HEADS_TO when it is a file:// URL), "
        "and reports the first broken link or chain (exit 1). --no-heads skips the heads, for a first run "
        "before any were exported, and says what it could not check."
    )

    def add_arguments(self, parser):
        parser.add_argument("--heads", metavar="FILE", help="the exported heads (default: OPSCONSOLE_AUDIT_HEADS_TO)")
        parser.add_argument(
            "--no-heads", action="store_true", help="check the chains only (first run): misses cut-off tails"
        )
        parser.add_argument(
            "--archive",
            metavar="FILE",
            nargs="+",
            help="verify archived months' files on their own, oldest first (manage.py archive_audit), not the database",
        )

    def handle(self, *args, heads=None, no_heads=False, archive=None, **options):
        if archive:
            return self.verify_archives(archive)
        checked = None if no_heads else self._checked_heads(heads or _heads_file())
        report = verify_chains(checked)
        slugs = dict(Workspace.objects.values_list("pk", "slug"))
        for chain in report.chains:
            older = f" ({chain.unchained} from before chaining)" if chain.unchained else ""
            name = _chain_name(chain.workspace_id, slugs, chain.lane)
            self.stdout.write(f"{name}: {chain.events} events{older}, head {chain.head or '-'}")
        if report.broken:
            raise CommandError(f"Audit chain broken: {_broken_text(report.broken, slugs)}.")
        if checked is not None:
            self.stdout.write(f"exported heads: {checked.lines} lines, all on their chains (last {checked.last_at})")
        else:
            self.stderr.write(UNCHECKED)
        self.stdout.write(
            f"Audit trail intact: {sum(c.events for c in report.chains)} events in {len(report.chains)} chain(s)."
        )

    def verify_archives(self, paths: list[str]) -> None:
        for check in verify_files(paths):
            if check.problem:
                raise CommandError(f"Archive broken: {check.path} {check.problem}.")
            self.stdout.write(f"{check.path}: {check.partition}, {check.events} events in {len(check.chains)} chain(s)")
        self.stdout.write(
            f"Archives intact: {len(paths)} file(s), each chain going on from the file before it. Verify the "
            "database too (without --archive): its chains go on from the newest archive."
        )

    def _checked_heads(self, path: str):
        if not path:
            raise CommandError(
                "No exported heads to hold the database to: give --heads FILE or set OPSCONSOLE_AUDIT_HEADS_TO "
                "to a file:// URL (or --no-heads for a first run, which cannot see events cut off the end)."
            )
        try:
            with open(path, encoding="utf-8") as lines:
                checked = check_heads(lines, archived_chains())
        except OSError as error:
            raise CommandError(f"Cannot read the exported heads: {error}") from error
        except BrokenArchiveRecord as error:
            raise CommandError(f"Audit chain broken: {error}.") from error
        if checked.problem:
            raise CommandError(f"Audit chain broken: {checked.problem}.")
        if not checked.lines:
            raise CommandError(f"No heads in {path}: export them first (manage.py export_audit_heads).")
        return checked


def _heads_file() -> str:
    target = urlsplit(settings.OPSCONSOLE_AUDIT_HEADS_TO)
    return target.path if target.scheme == "file" else ""


def _chain_name(workspace_id, slugs, lane: int = 0) -> str:
    if not workspace_id:
        return "global"
    return f"workspace {slugs.get(workspace_id, workspace_id)}" + (f" lane {lane}" if lane else "")


def _broken_text(broken, slugs) -> str:
    if broken.of_installation:
        return broken.problem
    if broken.event_id is None:
        chain = _chain_name(broken.workspace_id, slugs, broken.lane) if broken.workspace_id else "the global chain"
        return f"{chain} {broken.problem}"
    event = AuditEvent.objects.filter(pk=broken.event_id).values_list("kind", "created_at").first()
    what = f" ({event[0]}, {event[1]:%Y-%m-%d %H:%M:%S})" if event else ""
    return f"event {broken.event_id}{what} {broken.problem}"
