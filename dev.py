#!/usr/bin/env python3
"""One entry point for a fresh machine: `python3 dev.py demo` or `python3 dev.py test`.

Both create ./.venv (Python >= 3.11) with the Python that runs this script (`python3.13 dev.py test` makes it
again for 3.13), install every package of the workspace in editable mode plus the dev tools, and then run the
demo or the whole test suite. Re-running is cheap: pip skips what is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PACKAGES = [
    "packages/core[postgres,cli,metrics,testing]",
    "packages/stripe_safe",
    "packages/sendgrid_safe",
    "packages/ses_safe[testing]",
]


def venv_python() -> Path:
    return VENV / "bin" / "python"


def venv_version() -> str | None:
    """The major.minor of the Python ./.venv was made with, or None when there is none."""
    config = VENV / "pyvenv.cfg"
    if not config.exists():
        return None
    for line in config.read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() in ("version", "version_info"):
            return ".".join(value.strip().split(".")[:2])
    return None


def venv_moved() -> bool:
    """Whether ./.venv was copied or moved here from elsewhere (`cp -a` of a checkout): its scripts still start
    the other venv's Python, so `.venv/bin/pip install x` would install x there. A script names its Python on
    its first line, or (a long path) on the second, after a `#!/bin/sh` line."""
    pip = VENV / "bin" / "pip"
    if not pip.exists():
        return False
    head = pip.read_bytes()[:4096].decode(errors="replace").splitlines()[:2]
    python = head[0].removeprefix("#!").strip() if head else ""
    if python == "/bin/sh" and len(head) > 1 and '"' in head[1]:  # then: 'exec' "/path/to/python" "$0" "$@"
        python = head[1].split('"')[1]
    return python != str(venv_python())


def run(*args: str | Path) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    subprocess.run([str(a) for a in args], cwd=ROOT, check=True)


def setup() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs under whatever python3 the machine has
        sys.exit(f"safe-effects needs Python >= 3.11, this is {sys.version.split()[0]}")
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    made_with = venv_version()
    if made_with is not None and made_with != running:  # `python3.13 dev.py test` tests on 3.13, not the old venv
        print(f"./.venv is Python {made_with}, this is {running}: making it again", flush=True)
    elif venv_moved():
        print("./.venv was copied from another checkout (its scripts start that one's Python): made anew", flush=True)
    if made_with != running or not venv_python().exists() or venv_moved():
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    py = venv_python()
    run(py, "-m", "pip", "install", "--quiet", "--upgrade", "pip>=25.1")
    editable = [arg for pkg in PACKAGES for arg in ("-e", pkg)]
    run(py, "-m", "pip", "install", "--quiet", *editable, "--group", "dev")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    extra = sys.argv[2:]
    if command not in {"demo", "test", "setup"}:
        sys.exit("usage: python3 dev.py {demo|test|setup} [extra args]")
    setup()
    py = venv_python()
    env_note = "CI=true: PostgreSQL tests are mandatory" if os.environ.get("CI") == "true" else ""
    if command == "demo":
        run(py, "examples/demo.py", *extra)
    elif command == "test":
        if env_note:
            print(env_note, flush=True)
        run(py, "-m", "pytest", *extra)


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as exc:
        sys.exit(exc.returncode)
