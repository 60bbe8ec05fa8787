from ledger.management.commands._operation import OperationCommand
from ledger.people import cancellations


class Command(OperationCommand):
    help = "Cancel an operation that is pending, retrying or needs review."

    def act(self, operation, *, user, reason, **options):
        cancellations.cancel_operation(operation, user=user, reason=reason)
