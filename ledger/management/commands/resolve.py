from ledger.management.commands._operation import OperationCommand
from ledger.people import resolutions


class Command(OperationCommand):
    help = (
        "Resolve an unknown operation, or one that needs review, with evidence: you checked the destination "
        "by hand and it has the record (--external-id). The operation becomes succeeded with that id."
    )

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--external-id", required=True, help="The destination's record id you found.")

    def act(self, operation, *, user, reason, external_id, **options):
        resolutions.resolve_operation(operation, user=user, external_id=external_id, reason=reason)
        return f"{operation.key} is now succeeded with destination record {operation.external_id}."
