from ledger.management.commands._operation import ApprovalCommand
from ledger.people import approvals


class Command(ApprovalCommand):
    help = "Reject an operation awaiting approval (final), as a user with the approve permission; --note says why."

    def decide(self, operation, *, user, note):
        approvals.reject_operation(operation, user=user, note=note)
