"""workbook/'s parts import only parts of lower layers, as the map in workbook/README.md defines them."""

import ast
import re
from pathlib import Path

import pytest

from workbook import REPO_ROOT

PACKAGE = REPO_ROOT / "workbook"
MAP_ROW = re.compile(r"^\| (\d+) \| `([\w.]+?)/?` \|", re.MULTILINE)


def layers_from_map() -> dict[str, int]:
    """{part: layer} from the README's table; the paths module (`__init__.py`) is the part ''."""
    rows = MAP_ROW.findall((PACKAGE / "README.md").read_text())
    return {("" if part == "__init__.py" else part): int(layer) for layer, part in rows}


def part_of(module: str) -> str:
    """`workbook.ops.scatter` -> 'ops'; `workbook` itself -> ''."""
    names = module.split(".")
    return names[1] if len(names) > 1 and (PACKAGE / names[1]).is_dir() else ""


def module_name(path: Path) -> str:
    relative = path.relative_to(REPO_ROOT).with_suffix("")
    names = list(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
    return ".".join(names)


def _is_module(name: str) -> bool:
    return any((REPO_ROOT / Path(*name.split("."))).with_suffix(suffix).exists() for suffix in (".py", ""))


def _dotted(node) -> str | None:
    """`workbook.chapters.drawing` for that attribute chain; None for anything else."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(names)]) if isinstance(node, ast.Name) else None


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every workbook module that `source`, a module of `package`, imports or
    reaches: import statements (lazy ones included), importlib.import_module / __import__ with a literal name,
    and attribute chains from the package (`workbook.chapters.drawing` after `import workbook`).
    `from workbook.x import y` names workbook.x.y when y is a module, else workbook.x."""
    found, inner = [], set()  # inner: the attribute nodes inside a chain already looked at
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _dotted(node.func) in ("importlib.import_module", "__import__"):
            if node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("workbook"):
                found.append((node.lineno, node.args[0].value))
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            inner.update(id(part) for part in ast.walk(node.value))
            names = (_dotted(node) or "").split(".")
            modules = [".".join(names[:n]) for n in range(2, len(names) + 1) if _is_module(".".join(names[:n]))]
            if names[0] == "workbook" and modules:
                found.append((node.lineno, modules[-1]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("workbook")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parents = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parents + ([base] if base else []))
            if not base.startswith("workbook"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if _is_module(candidate) else base))
    return found


def test_the_map_names_every_part_and_nothing_else():
    parts = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert set(layers_from_map()) == parts | {""}
    loose = [path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"]
    assert not loose, f"modules outside every part of the map: {loose}"
    folders = [path.name for path in PACKAGE.iterdir() if path.is_dir() and any(path.glob("*.py"))]
    assert set(folders) <= parts, f"folders of Python without an __init__.py: {set(folders) - parts}"


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(PACKAGE)) for p in SOURCES])
def test_a_module_imports_only_lower_layers_and_its_own_part(path):
    layers = layers_from_map()
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    own = part_of(name)
    wrong = [
        f"line {line}: {module} (layer {layers[part_of(module)]})"
        for line, module in imported_modules(path.read_text(), package)
        if part_of(module) != own and layers[part_of(module)] >= layers[own]
    ]
    assert not wrong, f"{path.relative_to(REPO_ROOT)} (part {own or 'paths'}, layer {layers[own]}) imports: {wrong}"


def test_the_check_sees_an_upward_import():
    """The check itself: an ops module importing a chapter module is caught, and a relative import is resolved."""
    source = "from ..chapters import drawing\nfrom workbook.build import errors\nimport torch\n"
    modules = [module for _, module in imported_modules(source, "workbook.ops")]
    assert modules == ["workbook.chapters.drawing", "workbook.build.errors"]
    indirect = (
        "import importlib, workbook\n"
        "importlib.import_module('workbook.course.checking')\n"
        "__import__('workbook.chapters.display')\n"
        "workbook.exercises.ch01.check_softplus\n"
    )
    reached = sorted(module for _, module in imported_modules(indirect, "workbook.ops"))
    assert reached == ["workbook", "workbook.chapters.display", "workbook.course.checking", "workbook.exercises.ch01"]
    layers = layers_from_map()
    assert layers[part_of(modules[0])] > layers["ops"] > layers[part_of(modules[1])]
