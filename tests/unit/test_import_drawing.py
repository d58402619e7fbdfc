"""The import drawing in docs/architecture.md (tests/import_drawing.py): it is the code's, no
import points up a layer, and an import that does is found."""

from __future__ import annotations

from pathlib import Path

from tests import import_drawing
from tests.import_drawing import draw, is_current

PYPROJECT = """
[[tool.importlinter.contracts]]
name = "layers"
type = "layers"
layers = ["top", "left | right", "low : lower", "bottom"]
"""


def test_the_drawing_in_the_doc_is_the_codes():
    assert is_current(), "docs/architecture.md's import drawing is stale: run python -m tests.import_drawing"


def test_the_check_passes_and_no_import_points_up(capsys):
    assert import_drawing.main(["--check"]) == 0, capsys.readouterr().out
    drawing = draw()
    assert drawing.upward == [], [(edge.source, edge.target, edge.modules) for edge in drawing.upward]
    assert drawing.edges  # the packages do import each other: an empty drawing would pass anything


def test_router_pool_and_engine_are_nodes_of_their_own():
    mermaid = draw().mermaid()
    for package in ("router", "pool", "engine"):
        assert f'    {package}["{package} (' in mermaid
    # Never a `|` in a title: mermaid would read it as an edge label.
    assert 'subgraph layer4["router, pool"]' in mermaid
    assert not [line for line in mermaid.splitlines() if "subgraph" in line and "|" in line]


def write(root: Path, path: str, text: str = "") -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)


def synthetic_tree(root: Path) -> None:
    write(root, "pyproject.toml", PYPROJECT)
    for package in ("top", "left", "right", "low", "lower", "bottom"):
        write(root, f"{package}/__init__.py")
    write(root, "top/a.py", "import left.x\nfrom bottom import b\n")
    write(root, "left/x.py", "from bottom.b import thing\n")
    write(root, "low/y.py", "from lower import z\n")  # siblings of a `:` layer may import each other
    write(root, "lower/z.py", "")
    write(root, "bottom/b.py", "thing = 1\n")


def edges(root: Path) -> dict[tuple[str, str], tuple[tuple[str, ...], bool]]:
    return {(edge.source, edge.target): (edge.modules, edge.upward) for edge in draw(root).edges}


def test_a_tree_that_keeps_its_layers_has_no_upward_edge(tmp_path):
    synthetic_tree(tmp_path)
    assert edges(tmp_path) == {
        ("top", "left"): (("top.a",), False),
        ("top", "bottom"): (("top.a",), False),
        ("left", "bottom"): (("left.x",), False),
        ("low", "lower"): (("low.y",), False),
    }


def test_an_import_up_a_layer_inside_a_function_is_upward(tmp_path):
    synthetic_tree(tmp_path)
    write(tmp_path, "bottom/late.py", "def f():\n    import top.a\n    return top.a\n")
    found = edges(tmp_path)
    assert found["bottom", "top"] == (("bottom.late",), True)
    assert [(edge.source, edge.target) for edge in draw(tmp_path).upward] == [("bottom", "top")]
    assert "bottom -.->|\"1 upward\"| top" in draw(tmp_path).mermaid()


def test_an_import_between_independent_siblings_is_upward(tmp_path):
    synthetic_tree(tmp_path)
    write(tmp_path, "right/w.py", "import left.x\n")
    write(tmp_path, "right/v.py", "from left import x\n")
    assert edges(tmp_path)["right", "left"] == (("right.v", "right.w"), True)


def test_the_check_fails_on_a_stale_drawing(tmp_path):
    synthetic_tree(tmp_path)
    doc = tmp_path / import_drawing.DOC
    doc.parent.mkdir()
    doc.write_text(f"# Architecture\n\n{import_drawing.START}\n{import_drawing.END}\n")
    assert not is_current(tmp_path)
    doc.write_text(import_drawing.with_block(doc.read_text(), draw(tmp_path).block()))
    assert is_current(tmp_path)
    write(tmp_path, "top/more.py", "import low.y\n")
    assert not is_current(tmp_path)
