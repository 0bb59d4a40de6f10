"""Per-test options from ``@pytest.mark.safe_effects(...)``: keyword-only, validated, closest marker wins."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from safe_effects._crash import PROVIDER_SIDE, CrashPoint

StoreChoice = Literal["auto", "sqlite", "postgres"]
_STORES = get_args(StoreChoice)


@dataclass(frozen=True, slots=True, kw_only=True)
class SafeEffectsOptions:
    """What the marker may set; an unknown name or a bad value is refused with the list of valid ones."""

    store: StoreChoice = "auto"  # auto: PostgreSQL when SAFE_EFFECTS_TEST_PG_URL is set, else SQLite
    assert_all_fired: bool = True  # fail at teardown when an injected fault or a crash trap never fired
    crash_at: Sequence[CrashPoint | str] = ()  # safe_ledger raises SimulatedCrash at these executor points
    cassette_dir: str | None = None  # where safe_cassette finds cassettes (default: <test dir>/cassettes)

    def __post_init__(self) -> None:
        if self.store not in _STORES:
            raise ValueError(f"safe_effects marker: store must be one of {', '.join(_STORES)}, not {self.store!r}")
        if not isinstance(self.assert_all_fired, bool):
            raise ValueError(
                f"safe_effects marker: assert_all_fired must be True or False, not {self.assert_all_fired!r}"
            )
        crash_at: object = self.crash_at  # as given in the marker, whatever the annotation promises
        if not isinstance(crash_at, str | Sequence):
            raise ValueError(f"safe_effects marker: crash_at must be a crash point or a list of them, not {crash_at!r}")
        if self.cassette_dir is not None and not isinstance(self.cassette_dir, str):
            raise ValueError(f"safe_effects marker: cassette_dir must be a str path, not {self.cassette_dir!r}")
        points = (crash_at,) if isinstance(crash_at, str) else crash_at
        executor = [p.value for p in CrashPoint if p not in PROVIDER_SIDE]
        if any(p not in executor for p in points):
            raise ValueError(
                f"safe_effects marker: crash_at takes the executor's crash points ({', '.join(executor)}), "
                f"not {points!r}; a provider-side point is a trap on a fake: safe_crash.at(...)"
            )
        object.__setattr__(self, "crash_at", tuple(CrashPoint(p) for p in points))

    @classmethod
    def from_markers(cls, markers: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]) -> SafeEffectsOptions:
        """``(args, kwargs)`` of every marker, closest first (as ``node.iter_markers`` yields them)."""
        merged: dict[str, Any] = {}
        for args, kwargs in reversed(list(markers)):
            if args:
                raise ValueError(f"safe_effects marker takes keyword options only, got positional {tuple(args)!r}")
            merged.update(kwargs)
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(merged) - set(valid))
        if unknown:
            raise ValueError(f"unknown safe_effects marker option(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
        return cls(**merged)
