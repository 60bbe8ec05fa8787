"""The retry schedule: pure functions, property-tested (tests/ledger/test_retry.py)."""

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
