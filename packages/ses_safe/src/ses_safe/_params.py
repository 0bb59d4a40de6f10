"""botocore's own parameter check, run before the ledger records a send.

botocore validates a call against the operation's input shape client-side, before any request: a misspelt
keyword, a missing parameter or a value of the wrong type raises ``ParamValidationError`` and nothing is sent.
Met inside the ledger, that error would burn the intent as rejected (and a saga would compensate a send that
never went), so the wrapper runs the same check first and calls it what it is: bad input, nothing recorded.

botocore's report quotes each offending value (a recipient address, a whole message body), and an error's
text ends up in job-runner logs and tickets: the :class:`InvalidInput` names the parameter path and what was
wrong with it (a missing or unknown parameter, the type expected), never a value. botocore's own error, value
and all, stays its ``__cause__``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NamedTuple

from botocore.exceptions import ParamValidationError
from botocore.hooks import first_non_none_response
from botocore.validate import ParamValidator

from safe_effects import InvalidInput


class _Refusal(NamedTuple):
    """What botocore refused: its own error (values quoted) and the same findings without any value."""

    error: ParamValidationError
    described: str


def check_params(client: Any, method: str, params: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidInput` naming what ``client`` would refuse in ``method(**params)``, if anything.

    Also on a client built with ``Config(parameter_validation=False)``: there botocore's serializer fails on an
    unknown parameter instead (a ``KeyError``, which the ledger could only call unknown).
    """
    meta = client.meta
    _check_recipients(f"{meta.service_model.service_name}.{method}", params)
    operation = meta.service_model.operation_model(meta.method_to_api_mapping[method])
    refused = _refusal(params, operation.input_shape)
    if refused is None:
        return
    refused = _still_refused(client, operation, params, refused)
    if refused is not None:
        raise InvalidInput(
            f"{meta.service_model.service_name}.{method}: Parameter validation failed: {refused.described}; "
            "nothing was sent or recorded, so the corrected call can use the same IntentKey"
        ) from refused.error


MAX_RECIPIENTS = 50  # per message, To, Cc and Bcc together (SES's sending quotas page); more is MessageRejected


def _check_recipients(call: str, params: Mapping[str, Any]) -> None:
    """Refuse a message to more recipients than SES takes: refused by SES, the intent would end rejected and the
    corrected send need a new key. Counted where the call names them (``Destination``, v1 raw ``Destinations``);
    a raw message's own headers are left to SES."""
    destination = params.get("Destination")
    lists = (
        [destination.get(field) for field in ("ToAddresses", "CcAddresses", "BccAddresses")]
        if isinstance(destination, Mapping)
        else []
    )
    lists.append(params.get("Destinations"))
    count = sum(len(addresses) for addresses in lists if isinstance(addresses, list | tuple))
    if count > MAX_RECIPIENTS:
        raise InvalidInput(
            f"{call}: {count} recipients; SES takes at most {MAX_RECIPIENTS} per message (To, Cc and Bcc "
            "together): split the send into several intents; nothing was sent or recorded"
        )


def _refusal(params: Mapping[str, Any], shape: Any) -> _Refusal | None:
    """botocore's check of ``params`` against ``shape`` (what ``validate_parameters`` runs), or None if it passes."""
    report = ParamValidator().validate(params, shape)
    if not report.has_errors():
        return None
    # the findings as botocore recorded them, before its report put the values in (no public accessor)
    findings = getattr(report, "_errors", None) or [("invalid parameters", "", {})]
    described = "; ".join(_described(reason, name, details) for reason, name, details in findings)
    return _Refusal(ParamValidationError(report=report.generate_report()), described)


def _described(reason: str, name: str, details: Mapping[str, Any]) -> str:
    """One finding by parameter path and kind: the names botocore reports are the model's (or the caller's
    misspelt keyword), the values are the caller's data and are left out."""
    where = name.removeprefix(".") or "input"
    if reason == "missing required field":
        return f'Missing required parameter in {where}: "{details.get("required_name")}"'
    if reason == "unknown field":
        valid = ", ".join(map(str, details.get("valid_names", ())))
        return f'Unknown parameter in {where}: "{details.get("unknown_param")}", must be one of: {valid}'
    if reason in ("invalid type", "invalid type for document"):
        valid = ", ".join(
            str(kind).removeprefix("<class '").removesuffix("'>") for kind in details.get("valid_types", ())
        )
        return f"Invalid type for parameter {where}: got {type(details.get('param')).__name__}, valid types: {valid}"
    if reason in ("invalid range", "invalid length"):
        minimum = details.get("min_allowed")
        return f"Invalid {reason.removeprefix('invalid ')} for parameter {where}: below the minimum of {minimum}"
    if reason in ("more than one input", "empty input"):
        return f"{where} must set exactly one of: {', '.join(map(str, details.get('members', ())))}"
    return f"{reason} for parameter {where}"


def _still_refused(client: Any, operation: Any, params: Mapping[str, Any], refused: _Refusal) -> _Refusal | None:
    """What botocore would refuse, or None: it validates after the client's parameter hooks ran (boto3's way to
    take a custom keyword off, or fill in a default), so judge what they make of a copy. Only for a call that
    fails as written, so a valid call runs them once."""
    try:
        hooked = _as_hooks_leave(client, operation, copy.deepcopy(dict(params)))
    except Exception:  # params no copy can take (an open file), or a hook that fails on a copy: as written
        return refused
    return _refusal(hooked, operation.input_shape)


def _as_hooks_leave(client: Any, operation: Any, params: dict[str, Any]) -> Any:
    """``params`` after the events botocore emits before it validates (``BaseClient._emit_api_params``)."""
    meta = client.meta
    event = f"{meta.service_model.service_id.hyphenize()}.{operation.name}"
    context = {"client_region": meta.region_name, "client_config": meta.config}
    responses = meta.events.emit(f"provide-client-params.{event}", params=params, model=operation, context=context)
    params = first_non_none_response(responses, default=params)
    meta.events.emit(f"before-parameter-build.{event}", params=params, model=operation, context=context)
    return params
