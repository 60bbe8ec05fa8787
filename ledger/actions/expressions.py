"""JMESPath as tenants write it (a source's rules, an HTTP action's templates): compiled and checked
when saved, and evaluated under a budget.

JMESPath builds values by reference: ``[@, @]`` is a list of two references to what it was given,
so ``[@, @] | [@, @] | …`` evaluates in microseconds to a value whose JSON doubles per stage, and
whatever reads it next (validation, fingerprinting, storing) pays for 2**stages copies. So:

- **When saved** (``problems``): an expression longer than ``MAX_LENGTH`` characters, nested deeper
  than ``MAX_DEPTH``, or that could build more than ``MAX_COPIES`` copies of what it is given is
  refused. Copies are counted from the syntax: each item of a multiselect (``[a, b]``,
  ``{a: a, b: b}``) counts what its expression may hold; a pipe, a sub-expression or a projection
  multiplies the counts of its two sides; ``join`` and ``map`` multiply, other functions add.
- **When evaluated** (``search``): every value the evaluation builds is charged to a ``Budget`` by
  its size as JSON (counted through shared references, each shared part measured once), and the
  thread's CPU clock is read at each node. Over either, ``OverBudget`` (a ``JMESPathError``) stops the
  evaluation. CPU time, not the wall clock: on a loaded machine a sound listing waits for the CPU
  and would run out of a wall-clock budget it never spent.
"""

import json
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jmespath  # type: ignore[import-untyped]
from jmespath.exceptions import JMESPathError  # type: ignore[import-untyped]
from jmespath.parser import ParsedResult  # type: ignore[import-untyped]
from jmespath.visitor import TreeInterpreter  # type: ignore[import-untyped]

MAX_LENGTH = 1000
MAX_DEPTH = 32
MAX_COPIES = 64
# What one evaluation (or one delivery's rules together) may build, in characters of JSON: at least
# this, or four times its input where the input is bigger. The default body limit is 64 KiB.
MIN_UNITS = 256 * 1024
INPUT_MULTIPLE = 4
MAX_SECONDS = 0.25  # of this thread's CPU time


class OverBudget(JMESPathError):
    """An evaluation built more, or ran longer, than its budget allows."""

    def __init__(self, what: str):
        super().__init__(f"the expression went over its budget: {what}")


@dataclass
class Budget:
    """What the evaluations that share it may still build and how long they may still run. Sizes are
    JSON characters (a string its length, a number or a literal 1, a container its items, an
    object's keys their length), each container measured once however often it is referenced."""

    units: int = MIN_UNITS
    seconds: float = MAX_SECONDS
    spent: int = field(default=0, init=False)
    deadline: float = field(init=False)
    # id(container) -> (container, its size): the container is kept so that its id stays its own.
    _sizes: dict[int, tuple[Any, int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        self.deadline = time.thread_time() + self.seconds

    @classmethod
    def for_input(cls, size: int) -> "Budget":
        """The budget of evaluations over an input of ``size`` JSON characters (a body's bytes)."""
        return cls(units=max(MIN_UNITS, INPUT_MULTIPLE * size))

    @classmethod
    def over(cls, value: Any) -> "Budget":
        """The budget of evaluations over ``value``, measured."""
        budget = cls()
        budget.units = max(MIN_UNITS, INPUT_MULTIPLE * budget.size(value))
        return budget

    def check_clock(self) -> None:
        if time.thread_time() > self.deadline:
            raise OverBudget(f"it ran longer than {self.seconds:g} s")

    def charge(self, value: Any) -> None:
        """Count ``value`` (built, or kept as a result) against the budget."""
        self.spent += self.size(value)
        if self.spent > self.units:
            raise OverBudget(f"it built more than {self.units:,} characters of JSON")

    def size(self, value: Any) -> int:
        """``value``'s size as JSON characters, without walking a shared part twice (nor recursing:
        a vendor's answer may nest deeper than Python recurses)."""
        if not isinstance(value, list | dict):
            return _scalar_size(value)
        pending = [value]
        while pending:
            item = pending[-1]
            if id(item) in self._sizes:
                pending.pop()
                continue
            items = list(item.values()) if isinstance(item, dict) else item
            unsized = [inner for inner in items if isinstance(inner, list | dict) and id(inner) not in self._sizes]
            if unsized:
                pending += unsized
                continue
            pending.pop()
            size = 1 + sum(
                self._sizes[id(inner)][1] if isinstance(inner, list | dict) else _scalar_size(inner) for inner in items
            )
            if isinstance(item, dict):
                size += sum(len(str(key)) for key in item)
            self._sizes[id(item)] = (item, size)
        return self._sizes[id(value)][1]


def _scalar_size(value: Any) -> int:
    return len(value) if isinstance(value, str) else 1


class _Bounded(TreeInterpreter):
    """The tree interpreter, reading the clock at each node and charging each value it builds."""

    def __init__(self, budget: Budget):
        super().__init__()
        self.budget = budget

    def visit(self, node, *args, **kwargs):
        self.budget.check_clock()
        return super().visit(node, *args, **kwargs)

    def _built(self, value):
        if value is not None:
            self.budget.charge(value)
        return value

    # The nodes that build a value; every other node returns a part of its input, or a literal.
    def visit_multi_select_list(self, node, value):
        return self._built(super().visit_multi_select_list(node, value))

    def visit_multi_select_dict(self, node, value):
        return self._built(super().visit_multi_select_dict(node, value))

    def visit_projection(self, node, value):
        return self._built(super().visit_projection(node, value))

    def visit_value_projection(self, node, value):
        return self._built(super().visit_value_projection(node, value))

    def visit_filter_projection(self, node, value):
        return self._built(super().visit_filter_projection(node, value))

    def visit_flatten(self, node, value):
        return self._built(super().visit_flatten(node, value))

    def visit_slice(self, node, value):
        return self._built(super().visit_slice(node, value))

    def visit_function_expression(self, node, value):
        return self._built(super().visit_function_expression(node, value))


def search(expression: str, value: Any, budget: Budget | None = None) -> Any:
    """``expression`` evaluated over ``value`` within ``budget`` (by default, one of its own sized
    by ``value``); ``OverBudget`` when it goes over."""
    try:
        return _Bounded(budget or Budget.over(value)).visit(compiled(expression).parsed, value)
    except RecursionError:
        raise OverBudget("it nested deeper than Python evaluates") from None


def as_text(value: Any) -> str:
    """A value an expression found, as text: a string as it is, nothing for null, JSON otherwise
    (``true``, ``3``, ``{"a":1}``), as a template writes it into a string and a refusal reads."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@lru_cache(maxsize=1024)
def compiled(expression: str) -> ParsedResult:
    return jmespath.compile(expression.strip())


# --- checked when saved ------------------------------------------------------------------------------


def problem(expression: str) -> str:
    """Why ``expression`` (a string) may not be saved, or ""."""
    text = expression.strip()
    if len(text) > MAX_LENGTH:
        return f"longer than {MAX_LENGTH:,} characters"
    try:
        tree = compiled(text).parsed
    except JMESPathError as exc:
        return f"does not compile: {_first_line(exc)}"
    if _depth(tree) > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep"
    if (copies := _copies(tree)) > MAX_COPIES:
        return (
            f"could build {copies} copies of what it is given (at most {MAX_COPIES}: each item of a "
            "multiselect counts, and a pipe, a sub-expression or a projection multiplies)"
        )
    return ""


def _children(node: dict) -> list[dict]:
    # A slice's children are its numbers, not nodes.
    return [child for child in node.get("children", []) if isinstance(child, dict)]


def _depth(node: dict) -> int:
    # Called only on expressions of at most MAX_LENGTH characters, so the recursion is short.
    return 1 + max((_depth(child) for child in _children(node)), default=0)


_MULTIPLIED = {"subexpression", "pipe", "index_expression", "projection", "value_projection"}
_SUMMED = {"multi_select_list", "multi_select_dict"}


def _copies(node: dict) -> int:
    """How many copies of its input (or of a literal) the value of ``node`` may hold, at most."""
    kind, children = node["type"], _children(node)
    counts = [_copies(child) for child in children]
    if kind in _MULTIPLIED:
        return _product(counts)
    if kind in _SUMMED:
        return sum(counts)
    if kind == "filter_projection":  # its condition builds nothing that is kept
        return counts[0] * counts[1]
    if kind in ("or_expression", "and_expression"):
        return max(counts)
    if kind == "function_expression":
        return _function_copies(node["value"], counts)
    if kind in ("flatten", "key_val_pair", "expref"):
        return counts[0]
    return 1  # a field, an index, a slice, a literal, a comparison, @


def _function_copies(name: str, counts: list[int]) -> int:
    # The arity is checked when evaluated: a call with the wrong number of arguments counts as a sum.
    if name == "map" and len(counts) == 2:  # map(&expression, array): the expression's copies per element
        return counts[0] * counts[1]
    if name == "join" and len(counts) == 2:  # join(glue, array): the array's strings, and the glue between
        return counts[1] * (1 + counts[0])
    if name in ("sort_by", "min_by", "max_by") and len(counts) == 2:  # the array's elements, not the keys
        return counts[0]
    return max(1, sum(counts))


def _product(counts: list[int]) -> int:
    result = 1
    for count in counts:
        result *= count
    return result


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
