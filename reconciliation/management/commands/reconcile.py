import json
from dataclasses import asdict

from django.core.management.base import BaseCommand

from reconciliation.reconcile import reconcile_unknown_operations


class Command(BaseCommand):
    help = "Ask the destinations about every operation whose outcome is unknown (the qcluster does it each minute)."

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(asdict(reconcile_unknown_operations())))
