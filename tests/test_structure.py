"""The code's shape, enforced: one package per stage, one-way layers between them, no import cycles, short
modules and functions, a pipeline of library calls.

Layers, each package importing only from itself and the layers before it:
utils ← data ← families ← train ← search ← runtime ← lut ← export ← api ← pipeline ← cli.
A new package must be given a layer here.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("utils", "data", "families", "train", "search", "runtime", "lut", "export", "api", "pipeline", "cli")
LAYER_OF_PACKAGE = {  # most specific prefix wins
    "ofa.utils": "utils",
    "ofa.data": "data",
    "ofa.families": "families",
    "ofa.train": "train",
    "search": "search",
    "ofa.runtime": "runtime",
    "ofa.lut": "lut",
    "ofa.export": "export",
    "ofa.pipeline": "pipeline",
    "ofa.cli": "cli",
    "ofa.commands": "cli",
    "ofa.__main__": "cli",
}
API = {"ofa"}  # the top-level package only re-exports (README's `import ofa`); no module lives beside it
MAX_MODULE_LINES = 400
# imported inside functions only because they are optional extras (or slow to import for `ofa --help`)
OPTIONAL = {
    "openvino",
    "executorch",
    "torchao",  # ExecuTorch's quantizer (PT2E) comes with it
    "ai_edge_litert",
    "litert_torch",
    "huggingface_hub",
    "safetensors",
    "tensorboard",
    "torch.utils.tensorboard",
    "wandb",
    "mlflow",
    "nncf",
}
MAX_LINES, MAX_PARAMS = 60, 8


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in ("ofa", "search"):
        for f in (ROOT / pkg).rglob("*.py"):
            mods[".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = f
    return mods


MODULES = _modules()


def layer_of(module: str) -> str | None:
    if module in API:
        return "api"
    best = max((p for p in LAYER_OF_PACKAGE if module == p or module.startswith(p + ".")), key=len, default=None)
    return LAYER_OF_PACKAGE[best] if best else None


def _nodes_under(tree: ast.AST, inside: type | tuple[type, ...], test=lambda node: True) -> set[int]:
    """Ids of the nodes below any node of type ``inside`` that passes ``test``, in one walk of the tree."""
    under: set[int] = set()

    def visit(node: ast.AST, below: bool) -> None:
        if below:
            under.add(id(node))
        here = below or (isinstance(node, inside) and test(node))
        for child in ast.iter_child_nodes(node):
            visit(child, here)

    visit(tree, False)
    return under


@functools.cache  # several tests read every module's imports
def imports_of(module: str, path: Path) -> list[tuple[str, ast.AST, bool]]:
    """(imported project module, node, inside a function) for every import of a project module."""
    tree = ast.parse(path.read_text())
    skip = _nodes_under(tree, ast.If, lambda node: "TYPE_CHECKING" in ast.unparse(node.test))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    in_function = _nodes_under(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            found.append((name, node, id(node) in in_function))
    return found


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if layer_of(m) is None]


def test_modules_are_short():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_one_way(module):
    mine = LAYERS.index(layer_of(module))
    wrong = sorted(
        {
            name
            for name, _, _ in imports_of(module, MODULES[module])
            if name in MODULES and LAYERS.index(layer_of(name)) > mine
        }
    )
    assert not wrong, f"{module} ({LAYERS[mine]}) imports later layers: {wrong}"


def test_no_import_cycles():
    graph = {m: {n for n, _, _ in imports_of(m, MODULES[m]) if n in MODULES and n != m} for m in MODULES}
    packages = {m for m, f in MODULES.items() if f.name == "__init__.py"}  # re-exports do not form cycles
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node] - packages):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for m in sorted(set(MODULES) - packages):
        if m not in state:
            visit(m, [m])
    assert not cycles, " ; ".join(" -> ".join(c) for c in cycles)


def test_imports_inside_functions_only_for_optional_dependencies():
    bad = []
    for module, path in MODULES.items():
        if layer_of(module) == "cli":
            continue
        for name, node, inside in imports_of(module, path):
            if inside and isinstance(node, ast.Import | ast.ImportFrom):
                top = name.split(".")[0]
                if not any(name == o or name.startswith(o + ".") or top == o for o in OPTIONAL):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not sorted(set(bad)), sorted(set(bad))


def test_functions_are_short_and_take_few_parameters():
    bad = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
            params -= 1 if a.args and a.args[0].arg in ("self", "cls") else 0
            lines = node.end_lineno - node.lineno + 1
            where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
            if lines > MAX_LINES:
                bad.append(f"{where} is {lines} lines")
            if params > MAX_PARAMS:
                bad.append(f"{where} takes {params} parameters")
            if a.vararg or a.kwarg:
                bad.append(f"{where} takes *args/**kwargs")
    assert not bad, bad


def test_pipeline_stages_are_library_calls():
    """The pipeline reaches no stage through the CLI, a subprocess, importlib or argv lists."""
    package = {m: p for m, p in MODULES.items() if layer_of(m) == "pipeline"}
    assert {"ofa.pipeline", "ofa.pipeline.stages", "ofa.pipeline.summary"} <= set(package)
    for module, path in package.items():
        names = {name for name, _, _ in imports_of(module, path)}
        assert not {n for n in names if n.split(".")[0] in ("subprocess", "importlib") or layer_of(n) == "cli"}
        text = path.read_text()
        assert "argv" not in text and "main(" not in text, module


FAMILY_PACKAGES = sorted(p.name for p in (ROOT / "ofa" / "families").iterdir() if (p / "__init__.py").is_file())


def test_only_the_registry_names_a_family():
    """Outside ``ofa/families/`` every stage reaches a family through ``ofa.families.registry``; only the
    top-level package re-exports mbv3's classes."""
    assert "mbv3" in FAMILY_PACKAGES
    family_modules = tuple(f"ofa.families.{name}" for name in FAMILY_PACKAGES)
    wrong = sorted(
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if not module.startswith("ofa.families.") and module not in API
        for name, _, _ in imports_of(module, path)
        if name.startswith(family_modules)
    )
    assert not wrong, "; ".join(wrong)
