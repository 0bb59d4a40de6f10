"""``python -m safe_effects.cli``: the same CLI without the installed script."""

from . import main

main()
