"""botocore's own parameter check, run before the ledger records a send.

botocore validates a call against the operation's input shape client-side, before any request: a misspelt
keyword, a missing parameter or a value of the wrong type raises ``ParamValidationError`` and nothing is sent.
Met inside the ledger, that error would burn the intent as rejected (and a saga would compensate a send that
never went), so the wrapper runs the same check first and calls it what it is: bad input, nothing recorded.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ParamValidationError
from botocore.hooks import first_non_none_response
from botocore.validate import validate_parameters

from safe_effects import InvalidInput


def check_params(client: Any, method: str, params: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidInput` with botocore's report when ``client`` would refuse ``method(**params)``.

    Also on a client built with ``Config(parameter_validation=False)``: there botocore's serializer fails on an
    unknown parameter instead (a ``KeyError``, which the ledger could only call unknown).
    """
    meta = client.meta
    operation = meta.service_model.operation_model(meta.method_to_api_mapping[method])
    try:
        validate_parameters(params, operation.input_shape)
    except ParamValidationError as refused:
        error = _still_refused(client, operation, params, refused)
        if error is not None:
            raise InvalidInput(
                f"{meta.service_model.service_name}.{method}: {error}; nothing was sent or recorded, so the "
                "corrected call can use the same IntentKey"
            ) from error


def _still_refused(
    client: Any, operation: Any, params: Mapping[str, Any], refused: ParamValidationError
) -> ParamValidationError | None:
    """What botocore would refuse, or None: it validates after the client's parameter hooks ran (boto3's way to
    take a custom keyword off, or fill in a default), so judge what they make of a copy. Only for a call that
    fails as written, so a valid call runs them once."""
    try:
        hooked = _as_hooks_leave(client, operation, copy.deepcopy(dict(params)))
    except Exception:  # params no copy can take (an open file), or a hook that fails on a copy: as written
        return refused
    try:
        validate_parameters(hooked, operation.input_shape)
    except ParamValidationError as error:
        return error
    return None


def _as_hooks_leave(client: Any, operation: Any, params: dict[str, Any]) -> Any:
    """``params`` after the events botocore emits before it validates (``BaseClient._emit_api_params``)."""
    meta = client.meta
    event = f"{meta.service_model.service_id.hyphenize()}.{operation.name}"
    context = {"client_region": meta.region_name, "client_config": meta.config}
    responses = meta.events.emit(f"provide-client-params.{event}", params=params, model=operation, context=context)
    params = first_non_none_response(responses, default=params)
    meta.events.emit(f"before-parameter-build.{event}", params=params, model=operation, context=context)
    return params
