import json
from dataclasses import asdict

from django.core.management.base import BaseCommand

from ledger import sweep


class Command(BaseCommand):
    help = "Run the sweep once (the qcluster runs it every minute): expired leases, deadlines, lost nudges."

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(asdict(sweep.sweep())))
