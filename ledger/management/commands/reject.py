from ledger import approvals
from ledger.management.commands._operation import ApprovalCommand


class Command(ApprovalCommand):
    help = "Reject an operation awaiting approval (final), as a user with the approve permission; --note says why."
    service = staticmethod(approvals.reject_operation)
