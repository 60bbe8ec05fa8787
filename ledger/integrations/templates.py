"""Request templates of configured HTTP actions: JSON-like values whose strings may hold
``{{ expression }}``, each a JMESPath expression (the language of a source's mapping) over the
template's context, e.g. ``{"data": <the operation's payload>, "key": <its key>}``.

- A string that is exactly one ``{{ expression }}`` becomes the expression's value, whatever its
  type (``"{{ data.amount_cents }}"`` stays a number, an object stays an object).
- In any other string each ``{{ expression }}`` is replaced by its value as text (nothing for a
  missing value); in a path (``render_path``) that text is URL-encoded.
- Strings without braces are literal.

Expressions are compiled and checked when the configuration is saved (``problems``), so one that
does not compile, or could build without bound, is refused there, saying where, and never meets a
request; each evaluation runs within a budget sized by its context (``ledger.actions.expressions``).
"""

import re
from typing import Any
from urllib.parse import quote

from ledger.actions import expressions

EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


def problems(template: Any, where: str) -> list[str]:
    """Each expression in ``template`` that may not be saved (``expression_problems``), saying where."""
    found = []
    for path, text in _strings(template, where):
        for expression in EXPRESSION.findall(text):
            found += [f"{path}: {problem}" for problem in expression_problems(expression)]
        if "{{" in EXPRESSION.sub("", text):
            found.append(f"{path}: a {{{{ without its }}}}")
    return found


def expression_problems(expression: Any) -> list[str]:
    """Why ``expression`` may not be saved (it does not compile, or could build without bound), if so."""
    if not isinstance(expression, str) or not expression.strip():
        return ["an empty expression"]
    if problem := expressions.problem(expression):
        return [f"`{expression.strip()}` {problem}"]
    return []


def search(expression: str, value: Any) -> Any:
    return expressions.search(expression, value)


def render(template: Any, context: dict) -> Any:
    """``template`` with its expressions evaluated over ``context``."""
    if isinstance(template, dict):
        return {name: render(value, context) for name, value in template.items()}
    if isinstance(template, list):
        return [render(value, context) for value in template]
    if isinstance(template, str):
        return _render_text(template, context, lambda text: text)
    return template


def render_path(template: str, context: dict) -> str:
    """A URL path (and query) with each expression's text URL-encoded in place."""
    return _render_text(template, context, lambda text: quote(text, safe=""), whole_values=False)


def _render_text(text: str, context: dict, encode, *, whole_values: bool = True) -> Any:
    whole = EXPRESSION.fullmatch(text)
    if whole and whole_values:
        return search(whole.group(1), context)
    return EXPRESSION.sub(lambda match: encode(expressions.as_text(search(match.group(1), context))), text)


def _strings(template: Any, where: str):
    if isinstance(template, dict):
        for name, value in template.items():
            yield from _strings(value, f"{where}.{name}")
    elif isinstance(template, list):
        for index, value in enumerate(template):
            yield from _strings(value, f"{where}[{index}]")
    elif isinstance(template, str):
        yield where, template
