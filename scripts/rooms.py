"""The import graph by room (``make rooms``): each room of ``.importlinter``'s layers with its modules
and their lines, the arrows between rooms, circles between rooms, arrows that point up (or across
siblings that may not import each other), modules over the size a module should stay under, and any
import from ``ledger/`` into ``opsconsole/``.

Read from the code as it stands, by grimp (the graph ``lint-imports`` checks): nothing is imported
or run. Exits 1 when a circle or an arrow up is found, as ``lint-imports`` would fail; the sizes and
the imports into ``opsconsole/`` are reported, not judged.
"""

import configparser
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = "importlinter:contract:rooms"
MAX_LINES = 400
# Frozen history, not code anyone splits: listed as one line, left out of the size check.
FOLDED = "migrations"


@dataclass(frozen=True)
class Layers:
    """The rooms from the top layer down: ``rows[0]`` is the top. Siblings in one row joined by ``|``
    are independent (may not import each other); joined by ``:`` they may."""

    rows: tuple[tuple[str, ...], ...]
    independent: tuple[bool, ...]

    @property
    def rooms(self) -> list[str]:
        return [room for row in self.rows for room in row]

    def level(self, room: str) -> int | None:
        """The room's row, 0 at the top; None for what no layer names."""
        return next((index for index, row in enumerate(self.rows) if room in row), None)


def read_layers(path: Path = ROOT / ".importlinter") -> tuple[list[str], Layers]:
    """The root packages and the layers of the rooms contract."""
    config = configparser.ConfigParser()
    config.read(path)
    roots = config["importlinter"]["root_packages"].split()
    rows, independent = [], []
    for line in config[CONTRACT]["layers"].strip().splitlines():
        separator = "|" if "|" in line else ":"
        rows.append(tuple(name.strip() for name in line.split(separator)))
        independent.append(separator == "|" and len(rows[-1]) > 1)
    return roots, Layers(tuple(rows), tuple(independent))


def build_graph(roots: list[str]) -> grimp.ImportGraph:
    # grimp finds the packages on sys.path; run as a script, that starts at scripts/, not the root.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return grimp.build_graph(*roots, cache_dir=None)


def room_of(module: str, layers: Layers) -> str:
    """The room a module is in: the longest layer that names it or a package above it. What no layer
    names (``ledger.apps``, ``ledger.migrations``) is a room of its own, so that lumping them together
    cannot draw a circle the modules do not have."""
    named = [room for room in layers.rooms if module == room or module.startswith(room + ".")]
    return max(named, key=len) if named else ".".join(module.split(".")[:2])


def path_of(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None  # a namespace package (ledger) has no file


def lines_of(module: str) -> int:
    path = path_of(module)
    return len(path.read_text(encoding="utf-8").splitlines()) if path else 0


def arrows(graph: grimp.ImportGraph, layers: Layers) -> Counter:
    """(importing room, imported room) -> how many module imports run from one to the other."""
    found: Counter = Counter()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            pair = (room_of(importer, layers), room_of(imported, layers))
            if pair[0] != pair[1]:
                found[pair] += 1
    return found


def circles(room_arrows: Counter) -> list[list[str]]:
    """Rooms that reach each other through arrows (strongly connected, two rooms or more), sorted."""
    following = defaultdict(set)
    for importer, imported in room_arrows:
        following[importer].add(imported)
    rooms = sorted(set(following) | {room for targets in following.values() for room in targets})
    reach = {room: _reachable(room, following) for room in rooms}
    found = {tuple(sorted(other for other in rooms if other in reach[room] and room in reach[other])) for room in rooms}
    return sorted(list(group) for group in found if len(group) > 1)


def _reachable(start: str, following: dict) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for room in following.get(stack.pop(), ()):
            if room not in seen:
                seen.add(room)
                stack.append(room)
    return seen


def arrows_up(room_arrows: Counter, layers: Layers) -> list[tuple[str, str, int]]:
    """Arrows from a room to one of a higher layer, or between independent siblings of one layer."""
    wrong = []
    for (importer, imported), count in sorted(room_arrows.items()):
        above, below = layers.level(imported), layers.level(importer)
        if above is None or below is None:
            continue
        if above < below or (above == below and layers.independent[above]):
            wrong.append((importer, imported, count))
    return wrong


def oversized(graph: grimp.ImportGraph) -> list[tuple[str, int]]:
    sized = [(module, lines_of(module)) for module in graph.modules if f".{FOLDED}." not in f".{module}."]
    return sorted(((module, lines) for module, lines in sized if lines > MAX_LINES), key=lambda item: -item[1])


def imports_between(graph: grimp.ImportGraph, importing: str, imported: str) -> list[str]:
    """Each import from a module of package ``importing`` into package ``imported``, with its line."""
    found = []
    for module in sorted(graph.modules):
        if not (module == importing or module.startswith(importing + ".")):
            continue
        for target in sorted(graph.find_modules_directly_imported_by(module)):
            if target == imported or target.startswith(imported + "."):
                for detail in graph.get_import_details(importer=module, imported=target):
                    found.append(f"{module} -> {target} (line {detail['line_number']})")
    return found


def report(graph: grimp.ImportGraph, layers: Layers) -> tuple[list[str], bool]:
    """The listing's lines, and whether the layers hold (no circle, no arrow up)."""
    members = defaultdict(list)
    for module in graph.modules:
        members[room_of(module, layers)].append(module)
    room_arrows = arrows(graph, layers)
    order = layers.rooms + sorted(set(members) - set(layers.rooms))
    out = ["Rooms, from the top layer down (.importlinter), each module with its lines:"]
    for room in order:
        modules = sorted(members.get(room, []))
        if not any(path_of(module) for module in modules):
            continue  # a namespace package's own name (ledger): no file, no lines
        where = layers.level(room)
        out.append(f"{room}  [{'no layer' if where is None else f'layer {where + 1}'}]  {_total(modules)} lines")
        out += _module_lines(modules)
    out.append("")
    out.append("Arrows between rooms (module imports):")
    out += [f"  {importer} -> {imported}: {count}" for (importer, imported), count in sorted(room_arrows.items())]
    found_circles = circles(room_arrows)
    out.append("")
    out.append(f"Circles between rooms: {len(found_circles)}")
    out += [f"  {', '.join(group)}: each reaches the others" for group in found_circles]
    up = arrows_up(room_arrows, layers)
    out.append(f"Arrows up against the layers: {len(up)}")
    out += [f"  {importer} -> {imported}: {count}" for importer, imported, count in up]
    big = oversized(graph)
    out.append(f"Modules over {MAX_LINES} lines (migrations aside): {len(big)}")
    out += [f"  {_shown(module)}: {lines}" for module, lines in big]
    into = imports_between(graph, "ledger", "opsconsole")
    out.append(f"Imports from ledger/ into opsconsole/: {len(into)}")
    out += [f"  {line}" for line in into]
    return out, not found_circles and not up


def _total(modules: list[str]) -> str:
    return f"{sum(lines_of(module) for module in modules):,}"


def _module_lines(modules: list[str]) -> list[str]:
    lines, folded = [], defaultdict(list)
    for module in modules:
        parts = module.split(".")
        if FOLDED in parts:
            folded[".".join(parts[: parts.index(FOLDED) + 1])].append(module)
        elif path_of(module):
            lines.append(f"  {_shown(module)}  {lines_of(module)}")
    for package, inside in sorted(folded.items()):
        lines.append(f"  {package.replace('.', '/')}/  {_total(inside)} lines in {len(inside)} modules")
    return lines


def _shown(module: str) -> str:
    path = path_of(module)
    return path.relative_to(ROOT).as_posix() if path else module.replace(".", "/")


def main() -> int:
    roots, layers = read_layers()
    lines, holds = report(build_graph(roots), layers)
    print("\n".join(lines))
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
