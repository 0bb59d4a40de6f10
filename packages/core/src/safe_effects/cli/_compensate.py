"""``compensate``: launch the linked compensating intent (a refund) for a confirmed effect."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from safe_effects._errors import InvalidInput
from safe_effects._operator import Operator, actor
from safe_effects._tenants import DEFAULT_TENANT

from ._common import (
    AdaptersSpec,
    AsJson,
    OperatorName,
    ReasonText,
    StoreUrl,
    Tenant,
    adapter_for,
    emit,
    opened,
    print_json,
)


def _params(text: str) -> dict[str, Any]:
    try:
        params = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInput(f"--params is not valid JSON: {error}") from error
    except (RecursionError, ValueError) as error:  # nested past Python's depth, or a number past 4,300 digits
        raise InvalidInput(f"--params cannot be read: {type(error).__name__}: {error}") from None
    if not isinstance(params, dict):
        raise InvalidInput("--params must be a JSON object")
    return params


def compensate(
    key: str,
    *,
    store: StoreUrl,
    compensating_key: Annotated[str, typer.Option("--compensating-key", help="Intent key of the compensation.")],
    operation: Annotated[str, typer.Option("--operation", help="Provider operation, e.g. refunds.create.")],
    params: Annotated[str, typer.Option("--params", help="The compensation request as a JSON object.")],
    operator: OperatorName,
    reason: ReasonText,
    expect_version: Annotated[int, typer.Option("--expect-version", help="The version `show` displayed.")],
    tenant: Tenant = DEFAULT_TENANT,
    adapters: AdaptersSpec = None,
    as_json: AsJson = False,
) -> None:
    """Run the compensating intent once; the original turns compensated when it is confirmed."""
    request = _params(params)
    with opened(store, worker_id=actor(operator)) as ledger:
        original = ledger.get(key, tenant=tenant)
        receipt = Operator(ledger).compensate(
            adapter_for(adapters, original.provider),
            original_key=original.intent_key,
            compensating_key=compensating_key,
            operation=operation,
            params=request,
            operator=operator,
            reason=reason,
            expect_version=expect_version,
            tenant=tenant,
        )
        original = ledger.get(key, tenant=tenant)
    if as_json:
        print_json({"compensation": receipt.record, "original": original, "from_ledger": receipt.from_ledger})
        return
    emit(
        f"{receipt.record.intent_key} is {receipt.record.status} (provider id {receipt.provider_result_id}); "
        f"{original.intent_key} is now {original.status} v{original.version}"
    )
