"""The layout DESIGN.md promises, checked on the source: which packages may import what, and that every package
says what it exports (``__all__``) truthfully."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import warden

ROOT = Path(warden.__file__).parent
MODULES = sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute (relative imports resolved), at any depth of the file."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def offenders(where: str, banned: tuple[str, ...]) -> list[str]:
    out = []
    for path in MODULES:
        name = module_name(path)
        if name == where or name.startswith(where + "."):
            out += [f"{name} imports {m}" for m in sorted(imports(path)) if m.split(".")[0] in banned or any(
                m == b or m.startswith(b + ".") for b in banned)]
    return out


@pytest.mark.parametrize("where", ["warden.protocol", "warden.policy._decide"])
def test_sans_io_code_imports_no_io(where: str) -> None:
    """protocol and the pure decide() take bytes and facts, never a socket, a clock or the environment."""
    assert offenders(where, ("trio", "httpx", "os", "socket", "hypercorn", "anyio", "asyncio")) == []


def test_policy_does_not_import_the_sandbox() -> None:
    """Policy is the model and pure decisions; the sandbox reads the model (its settings included), never the
    other way round."""
    assert offenders("warden.policy", ("warden.sandbox",)) == []


def test_no_package_imports_another_packages_private_module() -> None:
    """``warden.audit._records`` is audit's own business; other packages use what ``warden.audit`` exports."""
    found = set()
    for path in MODULES:
        name = module_name(path)
        owner = name.split(".")[:2]
        for imported in imports(path):
            parts = imported.split(".")
            private = next((i for i, part in enumerate(parts) if part.startswith("_") and part != "__version__"),
                           None)
            if parts[0] == "warden" and private is not None and parts[:private][:2] != owner:
                found.add((name, ".".join(parts[: private + 1])))
    assert found == set()


PACKAGES = [*sorted(m.name for m in pkgutil.walk_packages([str(ROOT)], "warden.") if m.ispkg), "warden"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_exports_what_its_all_names(package: str) -> None:
    """Each package has an ``__all__`` (empty when it re-exports nothing), without repeats, naming only what exists."""
    module = importlib.import_module(package)
    names = getattr(module, "__all__", None)
    assert names is not None, f"{package} has no __all__"
    assert len(set(names)) == len(names), f"{package}.__all__ repeats a name"
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == [], f"{package}.__all__ names what it does not have"
