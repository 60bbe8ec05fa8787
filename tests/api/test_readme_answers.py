"""README.md's table of the submit API's answers is the API's: every (status, reason) the OpenAPI
document publishes for POST /events and /events/batch is a row, and no row names one it does not.
(tests/api/test_answers.py proves each published answer is really given.)"""

import re
from pathlib import Path
from typing import get_args

from opsconsole.api import answers

README = Path(__file__).resolve().parents[2] / "README.md"


def _tokens(model) -> set[str]:
    """What a person reads in the body: a refusal's `reason`, else its `status`; a batch's `results`."""
    fields = model.model_fields
    for name in ("reason", "status"):
        if name in fields and get_args(fields[name].annotation):
            return set(get_args(fields[name].annotation))
    return set(fields)


def published() -> set[tuple[int, str]]:
    pairs = set()
    for responses in (answers.EVENT_RESPONSES, answers.BATCH_RESPONSES):
        for status, annotation in responses.items():
            for model in get_args(annotation) or (annotation,):
                pairs |= {(status, token) for token in _tokens(model)}
    # The results of a batch, each with the status the event would have had alone.
    for model, item in answers._ITEMS.items():
        [status] = get_args(item.model_fields["http_status"].annotation)
        pairs |= {(status, token) for token in _tokens(model)}
    return pairs


def in_readme() -> set[tuple[int, str]]:
    """The first cells of the table under "Submitting events": `NNN `token` / `token` ...`."""
    section = README.read_text().split("## Submitting events", 1)[1].split("\n## ", 1)[0]
    table = section.split("| answer | meaning |", 1)[1].split("\n\n", 1)[0]
    pairs = set()
    for row in table.splitlines()[2:]:
        answer = row.split("|")[1]
        status = int(re.match(r"\s*(\d{3})\b", answer)[1])
        pairs |= {(status, token) for token in re.findall(r"`([a-z_]+)`", answer)}
    return pairs


def test_the_readme_lists_every_answer_of_the_submit_api_and_no_other():
    missing, extra = published() - in_readme(), in_readme() - published()

    assert sorted(missing) == [], "answers the API gives that README.md's table lacks"
    assert sorted(extra) == [], "rows of README.md's table the API never answers"


def test_the_answers_read_from_the_code_include_those_the_readme_once_missed():
    """Control: the comparison sees the whole published list, so the test above can fail."""
    assert {(409, "stale"), (413, "batch_too_large"), (409, "payload_conflict"), (401, "unauthorized")} <= published()
    assert {(503, "busy"), (500, "internal_error"), (200, "results")} <= published()
