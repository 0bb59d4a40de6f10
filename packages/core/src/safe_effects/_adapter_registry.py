"""Where the CLI finds a provider's adapter: the ``safe_effects.adapters`` entry points, or ``module:callable``.

A provider package registers a factory ``(env: Mapping[str, str]) -> ProviderAdapter`` under its provider
name, e.g. in its pyproject.toml::

    [project.entry-points."safe_effects.adapters"]
    stripe = "stripe_safe:adapter_from_env"

Factories are loaded and called lazily, the first time a record of that provider needs one, so a provider
whose credentials are absent does not stop the others.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ._adapter import ProviderAdapter
from ._errors import InvalidInput

ENTRY_POINT_GROUP = "safe_effects.adapters"


class RegisteredAdapters(Mapping[str, ProviderAdapter[Any]]):
    """Provider name -> adapter, each built on first use by its entry point's factory from ``env``."""

    def __init__(self, env: Mapping[str, str] | None = None, *, group: str = ENTRY_POINT_GROUP) -> None:
        self._env = dict(os.environ if env is None else env)
        self._points: dict[str, EntryPoint] = {ep.name: ep for ep in entry_points(group=group)}
        self._built: dict[str, ProviderAdapter[Any] | InvalidInput] = {}

    def __getitem__(self, provider: str) -> ProviderAdapter[Any]:
        if provider not in self._built:
            point = self._points[provider]  # KeyError: not registered, so Mapping.get answers None
            try:
                self._built[provider] = point.load()(self._env)
            except Exception as error:  # whatever a factory raises, the operator needs its name and cause
                # a factory reads its settings as env["NAME"]: a bare KeyError would print as just 'NAME'
                missing = isinstance(error, KeyError) and bool(error.args) and error.args[0] not in self._env
                cause = f"{error.args[0]} is not set in the environment" if missing else error
                self._built[provider] = InvalidInput(
                    f"the adapter for provider {provider!r} ({point.value}) could not be built: {cause}"
                )
        built = self._built[provider]
        if isinstance(built, InvalidInput):
            raise built
        return built

    def __iter__(self) -> Iterator[str]:
        return iter(self._points)

    def __len__(self) -> int:
        return len(self._points)


def load_adapters(
    spec: str | None = None, *, env: Mapping[str, str] | None = None
) -> Mapping[str, ProviderAdapter[Any]]:
    """``spec`` ``"package.module:callable"`` returns a dict of adapters; without it, the registered ones."""
    if not spec:
        return RegisteredAdapters(env)
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidInput(f"--adapters must look like package.module:callable, got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        # the safe-effects command, unlike python -m, does not search the current directory
        unfound = isinstance(error, ModuleNotFoundError) and error.name == module_name.partition(".")[0]
        hint = " (a module in the current directory: PYTHONPATH=. safe-effects ...)" if unfound else ""
        raise InvalidInput(f"--adapters {spec!r} cannot be loaded: {error}{hint}") from error
    if not callable(factory):
        raise InvalidInput(f"--adapters {spec!r} is a {type(factory).__name__}, not a callable returning the adapters")
    adapters = factory()
    if not isinstance(adapters, Mapping):
        raise InvalidInput(f"--adapters {spec!r} must return a dict of provider name -> adapter")
    return adapters
