"""The console reads a row id from a form or a link one way: digits only, within its column."""

import pytest

from opsconsole.console.forms import row_id


@pytest.mark.parametrize(
    ("text", "bits", "expected"),
    [
        ("42", 63, 42),
        (str(2**63 - 1), 63, 2**63 - 1),
        (str(2**63), 63, None),  # beyond a bigint
        (str(2**31), 31, None),  # beyond an integer column (a user's id)
        (str(2**31 - 1), 31, 2**31 - 1),
        ("0", 63, None),
        ("-3", 63, None),
        (" 7", 63, None),
        ("+7", 63, None),
        ("7_0", 63, None),  # int() would read it as 70
        ("٣", 63, None),  # a digit of another script: int() would read it as 3
        ("9" * 400, 63, None),  # refused before int() parses it
        ("", 63, None),
        (None, 63, None),
    ],
)
def test_a_row_id_is_digits_within_the_column(text, bits, expected):
    assert row_id(text, bits=bits) == expected
