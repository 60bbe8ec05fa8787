"""`make rooms` (scripts/rooms.py) lists the import graph by room: the rooms as they stand keep their
layers (no circle, no arrow up), and the listing finds a circle, an arrow up and an import into
opsconsole/ where a graph has one."""

import grimp

from scripts import rooms

LAYERS = rooms.Layers(rows=(("top",), ("left", "right"), ("base",)), independent=(False, True, False))


def graph_of(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="import")
    return graph


def test_the_rooms_have_no_circle_and_no_arrow_up():
    roots, layers = rooms.read_layers()
    room_arrows = rooms.arrows(rooms.build_graph(roots), layers)

    assert room_arrows  # the graph was read
    assert rooms.circles(room_arrows) == []
    assert rooms.arrows_up(room_arrows, layers) == []


def test_the_layers_are_read_from_importlinter_top_first():
    roots, layers = rooms.read_layers()

    assert roots == ["opsconsole", "reconciliation", "ledger", "standin"]
    assert layers.level("opsconsole") == 0
    assert layers.level("ledger.integrations") == layers.level("ledger.people")
    assert layers.level("ledger.integrations") < layers.level("ledger.intake") < layers.level("ledger.core")


def test_a_module_is_in_the_room_of_the_longest_layer_that_holds_it():
    layers = rooms.Layers(rows=(("app.tasks",), ("app",)), independent=(False, False))

    assert rooms.room_of("app.tasks.send", layers) == "app.tasks"
    assert rooms.room_of("app.models", layers) == "app"
    assert rooms.room_of("other.apps", layers) == "other.apps"


def test_it_counts_the_arrows_between_rooms():
    graph = graph_of(("top.a", "left.a"), ("top.b", "left.b"), ("left.a", "left.b"), ("left.a", "base"))

    assert rooms.arrows(graph, LAYERS) == {("top", "left"): 2, ("left", "base"): 1}


def test_an_arrow_up_and_an_arrow_between_independent_siblings_are_found():
    graph = graph_of(("top.a", "base.a"), ("base.a", "left.a"), ("left.a", "right.a"))
    room_arrows = rooms.arrows(graph, LAYERS)

    assert rooms.arrows_up(room_arrows, LAYERS) == [("base", "left", 1), ("left", "right", 1)]


def test_a_circle_through_three_rooms_is_found():
    graph = graph_of(("top.a", "left.a"), ("left.a", "base.a"), ("base.b", "top.b"), ("right.a", "base.a"))

    assert rooms.circles(rooms.arrows(graph, LAYERS)) == [["base", "left", "top"]]


def test_each_import_from_one_package_into_another_is_named_with_its_line():
    graph = graph_of(("ledger.commands.setup", "opsconsole.api"), ("opsconsole.api", "ledger.core"))

    assert rooms.imports_between(graph, "ledger", "opsconsole") == ["ledger.commands.setup -> opsconsole.api (line 1)"]
