"""The retry schedule: pure functions, property-tested (tests/ledger/core/test_retry.py)."""

import random
from collections.abc import Callable

_MAX_EXPONENT = 60  # beyond this the cap has long been reached; keeps 2**n from growing unbounded


def backoff_ceiling(attempt: int, *, base: float, cap: float) -> float:
    """The longest wait after ``attempt`` tries: ``min(cap, base * 2**attempt)``, never decreasing."""
    return min(cap, base * 2 ** min(attempt, _MAX_EXPONENT))


def retry_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    retry_after: float | None = None,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before the next try: full jitter below the ceiling, never before Retry-After."""
    delay = rand() * backoff_ceiling(attempt, base=base, cap=cap)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay


def schedule(max_attempts: int, base: float, cap: float) -> str:
    """The waits a retry policy allows between its tries, for people: "up to 2 s, 4 s, 8 s" (each
    wait is drawn below its ceiling, "full jitter")."""
    ceilings = [backoff_ceiling(attempt, base=base, cap=cap) for attempt in range(1, max(1, max_attempts))]
    if not ceilings:
        return "one try, no retry"
    return "up to " + ", ".join(f"{ceiling:g} s" for ceiling in ceilings) + f" ({max_attempts} tries)"
