from ledger.management.commands._operation import OperationCommand
from ledger.people import replays, review


class Command(OperationCommand):
    help = (
        "Replay an operation that needs review, under the same key (fresh attempts and deadline). If a try "
        "may have reached the destination, the destination is asked first: found -> succeeded, nothing "
        "sent; cannot tell -> refused unless --accept-duplicate-risk."
    )

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--accept-duplicate-risk",
            action="store_true",
            help="Replay even if the destination cannot tell whether it already acted "
            "(it may then act twice); audited as replay_forced with your reason.",
        )
        parser.add_argument(
            "--accept-config-change",
            action="store_true",
            help="Replay although the action's configuration (destination, timeouts, definition, "
            "policy) changed since the operation last ran; the changes are audited.",
        )

    def act(self, operation, *, user, reason, accept_duplicate_risk=False, accept_config_change=False, **options):
        try:
            replay = replays.replay_operation(
                operation,
                user=user,
                reason=reason,
                accept_duplicate_risk=accept_duplicate_risk,
                accept_config_change=accept_config_change,
            )
        except replays.DuplicateRisk as exc:
            raise review.ReviewError(
                f"{exc} To replay anyway, run the command again with --accept-duplicate-risk."
            ) from None
        except replays.ConfigChanged as exc:
            raise review.ReviewError(
                f"{exc} To replay under it, run the command again with --accept-config-change."
            ) from None
        if replay.verdict == "found":
            return f"{operation.key} is now succeeded: {replay.lookup}, so nothing was sent again."
        if replay.verdict == "forced":
            return f"{operation.key} is now {operation.state} (replay forced, accepting the duplicate risk)."
        return f"{operation.key} is now {operation.state}."
