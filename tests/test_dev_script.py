"""dev.py, the set-up entry point: it makes ./.venv again when run by another Python than the one that made it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_script", ROOT / "dev.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "VENV", tmp_path / ".venv")
    return module


@pytest.mark.parametrize(
    ("config", "version"),
    [
        ("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.13.0\n", "3.13"),
        ("home = /usr/bin\nversion_info = 3.12.1.final.0\n", "3.12"),  # virtualenv's spelling
        ("home = /usr/bin\n", None),
    ],
)
def test_the_venvs_python_is_read_from_its_config(dev: ModuleType, config: str, version: str | None) -> None:
    dev.VENV.mkdir()
    (dev.VENV / "pyvenv.cfg").write_text(config)
    assert dev.venv_version() == version


def test_no_venv_has_no_version(dev: ModuleType) -> None:
    assert dev.venv_version() is None


@pytest.mark.parametrize(
    ("shebang", "moved"),
    [
        ("#!{venv}/bin/python", False),
        ('#!/bin/sh\n\'\'\'exec\' "{venv}/bin/python" "$0" "$@"', False),  # pip's form for a long path
        ("#!/elsewhere/.venv/bin/python", True),
        ("#!/home/me{venv}/bin/python", True),  # copied from a folder whose path ends with this one's
        ('#!/bin/sh\n\'\'\'exec\' "/elsewhere/.venv/bin/python" "$0" "$@"', True),
    ],
)
def test_a_venv_copied_from_another_checkout_is_made_again(dev: ModuleType, shebang: str, moved: bool) -> None:
    """A `cp -a` of a checkout copies ./.venv too: its pip would install into the original's venv."""
    (dev.VENV / "bin").mkdir(parents=True)
    (dev.VENV / "bin" / "pip").write_text(shebang.format(venv=dev.VENV) + "\nimport sys\n")
    assert dev.venv_moved() is moved


def test_a_venv_without_pip_is_not_taken_for_a_copy(dev: ModuleType) -> None:
    assert dev.venv_moved() is False
