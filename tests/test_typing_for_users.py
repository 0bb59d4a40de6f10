"""What a type checker tells a user of the public API: the user's own code, checked by mypy --strict without
the project's configuration (no pydantic plugin), as a user's project would run it."""

from __future__ import annotations

import sys
from pathlib import Path

from mypy import api as mypy_api

USER_CODE = """
from opentelemetry import trace
from safe_effects import EffectRecord, EffectRequest, Ledger
from safe_effects.testing import GenericFakeAdapter, SafeEffectsOptions


def job(ledger: Ledger, adapter: GenericFakeAdapter, record: EffectRecord, options: SafeEffectsOptions) -> str:
    receipt = ledger.execute(adapter, EffectRequest(operation="charge", params={}), intent_key="a:b:c:v1")
    reveal_type(receipt.response)
    record.status = record.status
    receipt.from_ledger = True
    Ledger.open("sqlite:///x.db", leese=None)
    Ledger.open("sqlite:///x.db", tracer=trace.get_tracer("safe_effects"))  # OpenTelemetry's own Tracer type
    return receipt.response or ""
"""


SES_USER_CODE = """
import ses_safe
from safe_effects import Ledger


def email(ledger: Ledger) -> None:
    ses_safe.client("sesv2", ledger=ledger, region_name="eu-west-1", configuration_sett="x")
    ses = ses_safe.client("sesv2", ledger=ledger, region_name="eu-west-1", configuration_set="transactional")
    answer = ses.send_email(IntentKey="a:b:c:v1", FromEmailAdress="x@example.com", Content={"Raw": {"Data": b""}})
    ses.send_email(FromEmailAddress="x@example.com", Content={"Raw": {"Data": b""}})
    reveal_type(answer["MessageId"])
    reveal_type(ses.get_account()["SendingEnabled"])
    ses.send_emial()
    reveal_type(ses.without_ledger(reason="safe"))
"""


SENDGRID_USER_CODE = """
from safe_effects import Ledger
from sendgrid.helpers.mail import Mail  # type: ignore[import-untyped]
from sendgrid_safe import SendGridAPIClient


def mail(ledger: Ledger, message: Mail) -> None:
    sg = SendGridAPIClient("SG.key", ledger=ledger)
    response = sg.send(message, intent_key="a:b:c:v1")
    reveal_type(response.status_code)
    reveal_type(response.from_ledger)
    print(response.status_cod)
    sg.send(message)
    reveal_type(sg.host)
    sg.sned(message, intent_key="a:b:c:v1")
"""


def _mypy_strict(tmp_path: Path, code: str) -> tuple[list[str], str]:
    """mypy --strict on ``code`` as a user's module, without this project's configuration: its lines about the
    module (``error: ...``, ``note: ...``), and its whole output for an assertion's message."""
    (tmp_path / "user.py").write_text(code)
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    out, err, _ = mypy_api.run(
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
    return lines, out + err


def _assert_reported(checked: tuple[list[str], str], *starts: str) -> None:
    """Each of ``starts`` begins one of the lines mypy reported about the user's module."""
    lines, out = checked
    for start in starts:
        assert any(line.startswith(start) for line in lines), (start, out)


def test_the_public_api_keeps_a_users_types_and_refuses_what_run_time_refuses(tmp_path: Path) -> None:
    """The adapter's response type reaches the receipt (it was Any); a frozen record's field and a misspelt
    option of Ledger.open are type errors, as they are errors at run time; an OpenTelemetry tracer is not."""
    lines, out = _mypy_strict(tmp_path, USER_CODE)
    assert 'note: Revealed type is "str | None"' in lines, out
    assert 'error: Property "status" defined in "EffectRecord" is read-only  [misc]' in lines, out
    assert 'error: Property "from_ledger" defined in "Receipt" is read-only  [misc]' in lines, out
    misspelt = 'error: Unexpected keyword argument "leese" for "open" of "Ledger"'
    assert any(line.startswith(misspelt) for line in lines), out
    assert len([line for line in lines if line.startswith("error:")]) == 3, out  # nothing else: the rest types


def test_a_wrapped_ses_client_is_typed_as_boto3s_with_the_intent_required(tmp_path: Path) -> None:
    """With boto3-stubs installed, the wrapped client checks what the raw one does (its methods, each call's
    parameters), requires IntentKey, and says that a ledger's answer may have no MessageId; before, all Any."""
    _assert_reported(
        _mypy_strict(tmp_path, SES_USER_CODE),
        'error: Unexpected keyword argument "configuration_sett" for overloaded function "client"',
        'error: Unexpected keyword argument "FromEmailAdress" for "send_email" of "SafeSESv2Client"',
        'error: Missing named argument "IntentKey" for "send_email" of "SafeSESv2Client"',
        'note: Revealed type is "str | None"',
        'note: Revealed type is "bool"',
        'error: "SafeSESv2Client" has no attribute "send_emial"',
        'note: Revealed type is "mypy_boto3_sesv2.client.SESV2Client"',
    )


def test_a_sendgrid_send_is_typed_with_the_intent_required(tmp_path: Path) -> None:
    """send returned Any and took intent_key as optional, and every attribute was Any: a misspelt attribute of
    the client or its answer, or a send without an intent (MissingIntentKey at run time), passed mypy."""
    _assert_reported(
        _mypy_strict(tmp_path, SENDGRID_USER_CODE),
        'note: Revealed type is "int"',
        'note: Revealed type is "bool"',
        'error: "SendResponse" has no attribute "status_cod"',
        'error: Missing named argument "intent_key" for "send" of "SendGridAPIClient"',
        'note: Revealed type is "str"',
        'error: "SendGridAPIClient" has no attribute "sned"',
    )
