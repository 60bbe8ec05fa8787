from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ledger import retention


class Command(BaseCommand):
    help = (
        "Apply the retention windows (docs/retention.md): redact the payloads of operations finished longer ago "
        "than their payload window, delete the tombstones past their key window. Chunked: it may be stopped and "
        "run again. Runs daily on the worker cluster too."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--as-of",
            help="Apply the windows as of this time (ISO 8601, e.g. 2026-11-30T00:00Z; "
            "default now; never later than now).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Count what would change; change nothing.")
        parser.add_argument("--chunk", type=int, default=retention.CHUNK, help="Rows per transaction.")

    def handle(self, *args, as_of, dry_run, chunk, **options):
        when = _as_of(as_of)
        if chunk < 1:
            raise CommandError("--chunk must be at least 1.")
        report = retention.purge(as_of=when, dry_run=dry_run, chunk=chunk, progress=self.stdout.write, actor="cli")
        verb = "Would" if dry_run else "Did"
        self.stdout.write(
            f"{verb} redact {report.total('redacted')} payloads and delete {report.total('deleted')} "
            f"tombstones and {report.total('refused_deliveries')} refused deliveries, as of "
            f"{report.as_of.isoformat(timespec='seconds')}."
        )
        if report.ranges_dropped:
            dropped = "would drop" if dry_run else "dropped"
            self.stdout.write(
                f"The deliveries and attempts of {len(report.ranges_dropped)} ranges of operations {dropped} whole "
                f"(no row deleted): {', '.join(report.ranges_dropped)}."
            )
        if report.ranges_skipped:
            self.stdout.write(
                f"{report.ranges_skipped} ranges of operations could not be dropped (a lock, or a write since the "
                "look; see the log): their rows went one by one."
            )


def _as_of(text: str | None):
    if not text:
        return None
    try:
        when = parse_datetime(text.replace("Z", "+00:00"))
    except ValueError:
        when = None
    if when is None:
        raise CommandError(f"--as-of {text!r} is not a date and time: write ISO 8601, e.g. 2026-11-30T00:00+00:00.")
    if timezone.is_naive(when):
        raise CommandError(f"--as-of {text!r} has no UTC offset: add one (e.g. +00:00 or Z).")
    if when > timezone.now():
        raise CommandError("--as-of is in the future: a purge never runs ahead of the windows.")
    return when
