from ledger.management.commands._operation import ApprovalCommand
from ledger.people import approvals


class Command(ApprovalCommand):
    help = (
        "Approve an operation awaiting approval, as a user with the approve permission who did not submit, "
        "change or replay it."
    )

    def decide(self, operation, *, user, note):
        approvals.approve_operation(operation, user=user, note=note)
