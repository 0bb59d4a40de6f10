"""Each package installs on its own with pip: its wheel carries the licence, ``py.typed`` and every module, and
declares every third-party package its modules import.

The wheels are built as pip builds them (``pip wheel``, the packages' own hatchling backend, without network).
A module-level import of a package the wheel does not declare works in this repository's virtualenv, where
everything is installed, and fails only for a user who installs the one package.
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "core": "safe_effects",
    "stripe_safe": "stripe_safe",
    "sendgrid_safe": "sendgrid_safe",
    "ses_safe": "ses_safe",
}
# modules that only run with an extra installed (the testing toolkit, the CLI, the pytest plugin)
EXTRA_ONLY = frozenset({"testing", "cli", "_plugin", "pytest_plugin.py"})


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    folders = [str(ROOT / "packages" / folder) for folder in PACKAGES]
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out)]
    subprocess.run([*command, *folders], check=True, timeout=300, capture_output=True)
    return {folder: next(out.glob(f"{name}-*.whl")) for folder, name in PACKAGES.items()}


@pytest.mark.parametrize("folder", PACKAGES)
def test_wheel_carries_every_module_the_licence_and_py_typed(wheels: dict[str, Path], folder: str) -> None:
    source = ROOT / "packages" / folder / "src"
    expected = {
        path.relative_to(source).as_posix()
        for path in source.rglob("*")
        if path.is_file() and (path.suffix == ".py" or path.name == "py.typed")
    }
    with zipfile.ZipFile(wheels[folder]) as archive:
        names = archive.namelist()
        licence = archive.read(next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))).decode()
        text = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    shipped = {name for name in names if ".dist-info/" not in name}
    assert shipped == expected
    assert licence == (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence
    info = Parser().parsestr(text)
    assert info["License-Expression"] == "Apache-2.0"
    assert info["License-File"] == "LICENSE"


def module_imports(tree: ast.Module) -> set[str]:
    """Top-level names imported at module level: what runs on ``import``, not inside functions."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [Requirement(line) for line in Parser().parsestr(text).get_all("Requires-Dist") or []]


def declared(wheels: dict[str, Path], folder: str) -> tuple[set[str], set[str]]:
    """(base dependencies, with every extra too), following ``safe-effects[extra]`` into the core's extras."""
    own = requirements(wheels[folder])
    core = requirements(wheels["core"])
    base = {canonicalize_name(r.name) for r in own if r.marker is None}
    with_extras = {canonicalize_name(r.name) for r in own}
    for wanted in (r for r in own if canonicalize_name(r.name) == "safe-effects"):
        for extra in wanted.extras:
            with_extras |= {
                canonicalize_name(r.name) for r in core if r.marker is not None and r.marker.evaluate({"extra": extra})
            }
    return base, with_extras


@pytest.mark.parametrize("folder", PACKAGES)
def test_every_imported_package_is_declared(wheels: dict[str, Path], folder: str) -> None:
    """A base module may import only base dependencies; a testing, CLI or plugin module also its extras'."""
    base, with_extras = declared(wheels, folder)
    distributions = importlib.metadata.packages_distributions()
    own = PACKAGES[folder]
    source = ROOT / "packages" / folder / "src" / own
    undeclared = []
    for path in sorted(source.rglob("*.py")):
        extra_only = bool(EXTRA_ONLY.intersection(path.relative_to(source).parts))
        allowed = with_extras if extra_only else base
        for name in module_imports(ast.parse(path.read_text())):
            if name in sys.stdlib_module_names or name in (own, "__future__"):
                continue
            provided = {canonicalize_name(d) for d in distributions.get(name, [name])}
            if not provided & allowed:
                undeclared.append(f"{path.relative_to(source.parent)} imports {name} ({', '.join(sorted(provided))})")
    assert undeclared == []
