from ledger import approvals
from ledger.management.commands._operation import ApprovalCommand


class Command(ApprovalCommand):
    help = "Approve an operation awaiting approval, as a user with the approve permission (not its submitter)."
    service = staticmethod(approvals.approve_operation)
