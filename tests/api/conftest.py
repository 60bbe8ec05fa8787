"""The fuzzing pass over the published API: its tally, printed at the end of every test run."""

from collections import Counter

import pytest
from schemathesis.pytest.plugin import SchemathesisFunction

# Each generated request's status, kept on its test's report: the tally is summed from the reports,
# so it is whole when pytest-xdist ran the tests in other processes.
STATUS = "schemathesis status"


class FuzzTally:
    def __init__(self, user_properties: list):
        self.user_properties = user_properties

    def count(self, status: int) -> None:
        self.user_properties.append((STATUS, status))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """schemathesis names each operation's test (``test_...[POST /api/v1/events]``) but, under pytest 9,
    gives them all the function's node id: each gets its name back in its id, so that pytest-xdist,
    which tells tests apart by id, runs every one of them."""
    for item in items:
        if isinstance(item, SchemathesisFunction):
            item._id = item.parent.id.child(item.name)


@pytest.fixture
def fuzz_tally(request) -> FuzzTally:
    return FuzzTally(request.node.user_properties)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    statuses = Counter(
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in report.user_properties
        if name == STATUS
    )
    if not statuses:
        return
    server_errors = sum(n for status, n in statuses.items() if status >= 500)
    listed = ", ".join(f"{status}: {n}" for status, n in sorted(statuses.items()))
    terminalreporter.write_sep("-", "schemathesis")
    terminalreporter.write_line(f"schemathesis: {statuses.total()} cases, {server_errors} server errors ({listed})")
