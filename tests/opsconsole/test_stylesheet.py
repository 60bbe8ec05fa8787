"""The console's stylesheet parses as its authors meant: an unclosed block (a merge that dropped a
brace once) silently swallows every rule after it, and nothing else would notice."""

import re
from pathlib import Path

STYLESHEET = Path(__file__).resolve().parents[2] / "static" / "console.css"


def test_every_block_of_the_stylesheet_is_closed_where_it_should_be():
    text = re.sub(r"/\*.*?\*/", "", STYLESHEET.read_text(), flags=re.S)
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"line {number} closes a block that was not open"
        # Only @media (and the like) nest: a rule opened inside a rule means one was left open.
        assert depth <= 2, f"line {number} is three blocks deep: a block above it was left open"
    assert depth == 0, "a block is left open at the end of the stylesheet"
