"""What a type checker tells a user of the public API: the user's own code, checked by mypy --strict without
the project's configuration (no pydantic plugin), as a user's project would run it."""

from __future__ import annotations

import sys
from pathlib import Path

from mypy import api as mypy_api

USER_CODE = """
from safe_effects import EffectRecord, EffectRequest, Ledger
from safe_effects.testing import GenericFakeAdapter, SafeEffectsOptions


def job(ledger: Ledger, adapter: GenericFakeAdapter, record: EffectRecord, options: SafeEffectsOptions) -> str:
    receipt = ledger.execute(adapter, EffectRequest(operation="charge", params={}), intent_key="a:b:c:v1")
    reveal_type(receipt.response)
    record.status = record.status
    receipt.from_ledger = True
    Ledger.open("sqlite:///x.db", leese=None)
    return receipt.response or ""
"""


def test_the_public_api_keeps_a_users_types_and_refuses_what_run_time_refuses(tmp_path: Path) -> None:
    """The adapter's response type reaches the receipt (it was Any); a frozen record's field and a misspelt
    option of Ledger.open are type errors, as they are errors at run time."""
    (tmp_path / "user.py").write_text(USER_CODE)
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    out, err, status = mypy_api.run(
        [
            str(tmp_path / "user.py"),
            "--strict",
            "--config-file",
            str(tmp_path / "mypy.ini"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--python-executable",
            sys.executable,
        ]
    )
    lines = [line.partition(": ")[2] for line in out.splitlines() if line.startswith(str(tmp_path / "user.py"))]
    assert 'note: Revealed type is "str | None"' in lines, out
    assert 'error: Property "status" defined in "EffectRecord" is read-only  [misc]' in lines, out
    assert 'error: Property "from_ledger" defined in "Receipt" is read-only  [misc]' in lines, out
    misspelt = 'error: Unexpected keyword argument "leese" for "open" of "Ledger"'
    assert any(line.startswith(misspelt) for line in lines), out
    assert len([line for line in lines if line.startswith("error:")]) == 3, out  # nothing else: the rest types
    assert status == 1, err
