from ledger import review
from ledger.management.commands._operation import OperationCommand


class Command(OperationCommand):
    help = "Replay an operation that needs review, under the same key (fresh attempts and deadline)."
    service = staticmethod(review.replay_operation)
