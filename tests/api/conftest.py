"""The fuzzing pass over the published API: its tally, printed at the end of every test run."""

from collections import Counter
from dataclasses import dataclass, field

import pytest

TALLY = pytest.StashKey["FuzzTally"]()


@dataclass
class FuzzTally:
    statuses: Counter = field(default_factory=Counter)

    def count(self, status: int) -> None:
        self.statuses[status] += 1

    @property
    def cases(self) -> int:
        return self.statuses.total()

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


@pytest.fixture
def fuzz_tally(request) -> FuzzTally:
    return request.config.stash.setdefault(TALLY, FuzzTally())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tally = config.stash.get(TALLY, None)
    if tally is None:
        return
    statuses = ", ".join(f"{status}: {n}" for status, n in sorted(tally.statuses.items()))
    terminalreporter.write_sep("-", "schemathesis")
    terminalreporter.write_line(f"schemathesis: {tally.cases} cases, {tally.server_errors} server errors ({statuses})")
