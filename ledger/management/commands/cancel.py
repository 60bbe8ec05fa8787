from ledger import review
from ledger.management.commands._operation import OperationCommand


class Command(OperationCommand):
    help = "Cancel an operation that is pending, retrying or needs review."
    service = staticmethod(review.cancel_operation)
