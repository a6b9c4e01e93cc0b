"""The package's layers, read from the source (nothing is imported): every import counts, also those
inside functions (``if TYPE_CHECKING:`` blocks are types only and do not), and the rules below hold.

Layers, lowest first; a module imports modules of its own layer or lower ones only:

0. streams and errors: ``errors``, ``_env``, ``_version``, ``streams``, ``hooks``, ``frameworks``,
   ``strategy``, ``_dlpack``
1. the backend protocol and the driver: ``backend``
2. the model: ``sim`` (a backend; nothing below the tools imports it)
3. the ordering core: ``plan``, ``program``, ``turns``, ``interrupts``, ``views``, ``occupancy``, ``profile``,
   ``calls``, ``buffers``, ``holds``, ``keepalive``, ``ledger``, ``inputs``, ``frame``, ``steady``, ``engine``, ``lazy``
4. guards: ``guarding``, ``construction``, ``contract``, ``blocks``, ``class_guard``
5. outputs: ``outputs``
6. SDK profiles: ``profiles``
7. tools: ``testing``, ``bench``, ``tools``, ``integrations`` (Ray, ...), the package's face (``__init__``, ``__main__``)
"""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "streamsafe"

LAYERS = {
    "errors": 0, "identity": 0, "sharing": 0, "_env": 0, "_version": 0, "streams": 0, "hooks": 0, "frameworks": 0, "strategy": 0, "_dlpack": 0,
    "backend": 1,
    "sim": 2,
    "plan": 3, "program": 3, "turns": 3, "interrupts": 3, "views": 3, "occupancy": 3, "profile": 3, "calls": 3,
    "buffers": 3, "holds": 3, "keepalive": 3, "ledger": 3, "inputs": 3, "frame": 3, "steady": 3, "engine": 3,
    "lazy": 3,
    "guarding": 4, "construction": 4, "contract": 4, "blocks": 4, "class_guard": 4,
    "outputs": 5,
    "profiles": 6,
    "testing": 7, "bench": 7, "tools": 7, "integrations": 7, "__init__": 7, "__main__": 7,
}
MODEL = 2


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """Every import of ``path`` (outside ``if TYPE_CHECKING:``) as (module, names taken, line)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names = [alias.name for alias in node.names]
            found.append((module, names, node.lineno))
            for name in names:  # `from . import hooks`: the submodule is imported too
                found.append((f"{module}.{name}", [], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _own(module: str) -> str | None:
    """The streamsafe module an imported name resolves to (a module of this tree), else ``None``."""
    while module:
        if module in MODULES:
            return module
        module = module.rpartition(".")[0]
    return None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges = graph.setdefault(name, set())
        for module, _, _ in _imports(path):
            target = _own(module)
            # (a module's own packages are imported before it: an edge to one is no import of the module's)
            if target is not None and target != name and not name.startswith(target + "."):
                edges.add(target)
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    if module == "streamsafe.__main__":
        key = "__main__"
    return LAYERS[key]


def test_every_module_has_a_layer() -> None:
    missing = [m for m in MODULES if m != "streamsafe" and m.split(".")[1] not in LAYERS]
    assert missing == [], f"give these modules a layer in LAYERS (and docs/design.md's module map): {missing}"


def test_no_import_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_layers_import_one_way() -> None:
    wrong = []
    for name, edges in _graph().items():
        if name == "streamsafe":
            continue
        for target in edges:
            if _layer(target) > _layer(name):
                wrong.append(f"{name} (layer {_layer(name)}) imports {target} (layer {_layer(target)})")
    assert wrong == [], "\n".join(sorted(wrong))


def test_the_core_never_imports_the_model() -> None:
    wrong = [f"{name} imports {target}" for name, edges in _graph().items() if name != "streamsafe"
             and _layer(name) not in (MODEL, 7) for target in edges if _layer(target) == MODEL]
    assert wrong == [], "\n".join(sorted(wrong))


def test_no_module_takes_another_modules_private_names() -> None:
    wrong = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        imported_modules: set[str] = set()
        for module, names, line in _imports(path):
            target = _own(module)
            if target is None or target == name:
                continue
            for taken in names:
                if taken.startswith("_") and not taken.startswith("__") and f"{module}.{taken}" not in MODULES:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} takes {taken} from {module}")
                if f"{module}.{taken}" in MODULES:
                    imported_modules.add(taken)
            if not names:
                imported_modules.add(module.rpartition(".")[2])
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported_modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} reads {node.value.id}.{node.attr}")
    assert wrong == [], "\n".join(wrong)


_MODULE_OBJECTS = {"sys", "os", "torch", "ctypes", "cupy", "jax", "signal", "threading", "types", "inspect"}
"""Names that hold a module, not an object: their underscored attributes are the module's API (``sys._getframe``)."""
_OUTSIDE = ("sim", "testing", "bench")
"""The model, the emulated SDKs and the benchmark: they stand in for a driver, an SDK and a user, and reach in."""


def test_no_module_reads_another_objects_private_fields() -> None:
    """An object's ``_name`` is read and written only by its own methods (``self._name``, ``cls._name``): every other
    object is reached through public attributes and methods."""
    wrong = []
    for name, path in MODULES.items():
        parts = name.split(".")
        if len(parts) > 1 and parts[1] in _OUTSIDE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in ("self", "cls", *_MODULE_OBJECTS):
                continue
            if node.attr == "_is_owned":  # (the standard library's lock ownership test, as threading.Condition uses it)
                continue
            wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} reads {ast.unparse(node)}")
    assert wrong == [], "\n".join(wrong)
