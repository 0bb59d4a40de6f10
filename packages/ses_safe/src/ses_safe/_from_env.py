"""The reconciler's SES adapter, built from the environment for ``safe-effects reconcile``."""

from __future__ import annotations

from collections.abc import Mapping

import boto3

from safe_effects import InvalidInput

from ._adapter import SesAdapter
from ._client import boundary_config
from ._contract import CONNECT_TIMEOUT, READ_TIMEOUT


def adapter_from_env(env: Mapping[str, str]) -> SesAdapter:
    """boto3's usual credentials chain; ``SES_SAFE_REGION`` or ``AWS_REGION`` and optional ``SES_SAFE_ENDPOINT_URL``.

    Lookups read ``get_message_insights`` (sesv2); SES events recorded as evidence settle the rest.
    """
    session = boto3.session.Session()
    region = env.get("SES_SAFE_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if not (region or session.region_name):  # botocore's own words ("You must specify a region") name no setting
        raise InvalidInput(
            "SES_SAFE_REGION (or AWS_REGION, or a region in the AWS config) is not set in the environment"
        )
    endpoint = env.get("SES_SAFE_ENDPOINT_URL") or None
    v2 = session.client(
        "sesv2",
        region_name=region,
        endpoint_url=endpoint,
        config=boundary_config(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT),
    )
    return SesAdapter(v2, insights=lambda message_id: v2.get_message_insights(MessageId=message_id))
