"""The reconciler's SendGrid adapter, built from the environment for ``safe-effects reconcile``."""

from __future__ import annotations

from collections.abc import Mapping

import sendgrid

from ._adapter import SendGridAdapter

_FALSE = {"0", "false", "no", "off"}


def adapter_from_env(env: Mapping[str, str]) -> SendGridAdapter:
    """``SENDGRID_API_KEY`` (required), ``SENDGRID_HOST`` (optional) and ``SENDGRID_ACTIVITY_LOOKUP`` (set it to
    ``false`` when the account lacks the Email Activity add-on: webhook evidence then settles unknowns alone)."""
    sdk = sendgrid.SendGridAPIClient(
        api_key=env["SENDGRID_API_KEY"], host=env.get("SENDGRID_HOST", "https://api.sendgrid.com")
    )
    activity = env.get("SENDGRID_ACTIVITY_LOOKUP", "true").strip().lower() not in _FALSE
    return SendGridAdapter(sdk, activity_lookup=activity)
