from ledger.management.commands._operation import OperationCommand
from ledger.people import review


class Command(OperationCommand):
    help = "Cancel an operation that is pending, retrying or needs review."

    def act(self, operation, *, user, reason, **options):
        review.cancel_operation(operation, user=user, reason=reason)
