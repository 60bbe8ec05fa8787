"""Crash points for the fault tests (tests/faults/). Inert unless a test sets the environment.

``OPSCONSOLE_CRASH_AT=<point>`` makes the process that reaches that point kill itself with
SIGKILL, as a power cut would. With ``OPSCONSOLE_CRASH_ONCE_FILE=<path>`` it crashes only if that
file does not exist yet (and creates it first), so the restarted worker carries on.
"""

import os
import signal

# Points on the internal path (prepare-brief), and the one external point: after the destination
# acted, before the outcome is recorded.
POINTS = ("after_claim", "after_commit", "mid_batch")
EXTERNAL_POINTS = ("after_external_call",)


def crash_point(name: str) -> None:
    if os.environ.get("OPSCONSOLE_CRASH_AT") != name:
        return
    once_file = os.environ.get("OPSCONSOLE_CRASH_ONCE_FILE")
    if once_file:
        try:
            with open(once_file, "x") as marker:
                marker.write(f"{name} {os.getpid()}\n")
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)
