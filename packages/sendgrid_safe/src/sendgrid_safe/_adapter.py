"""The ``ProviderAdapter`` for SendGrid Mail Send: what the ledger calls, and nothing else."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import sendgrid
from python_http_client.exceptions import HTTPError

from safe_effects import (
    DEFAULT_TENANT,
    LOOKUP_ERROR,
    DeployCheck,
    EffectRecord,
    EffectRequest,
    IntentKey,
    LookupResult,
    LookupStatus,
    ProviderContract,
    Verdict,
)

from . import _client, _rules
from ._webhook_settings import check_event_webhook

# what the deploy check reads of the environment: the webhook endpoint's address and the key it verifies with
WEBHOOK_URL_ENV = "SENDGRID_WEBHOOK_URL"
WEBHOOK_KEY_ENV = "SENDGRID_WEBHOOK_PUBLIC_KEY"


class SendGridAdapter:
    """Sends through a raw SDK client, classifies its errors, looks intents up in the Email Activity API."""

    provider = _rules.PROVIDER

    def __init__(
        self,
        sdk: sendgrid.SendGridAPIClient,
        *,
        timeout: float = _rules.DEFAULT_TIMEOUT,
        activity_lookup: bool = True,
        lookup_min_interval: float = 60.0 / 6,
    ) -> None:
        self.sdk = sdk
        self.timeout = timeout
        self.activity_lookup = activity_lookup  # False when the account lacks the paid add-on
        self.lookup_min_interval = lookup_min_interval  # SendGrid allows 6 activity queries a minute
        self._lookup_lock = threading.Lock()
        self._last_lookup = -float("inf")

    def contract_for(self, operation: str) -> ProviderContract:
        return _rules.CONTRACT

    def provider_key(self, tenant: str, intent_key: IntentKey) -> str:
        return f"{tenant}:{intent_key}"

    def dispatch(self, request: EffectRequest, provider_key: str) -> Any:
        body = request.payload if request.payload is not None else request.params
        stamped = _rules.stamp(body, provider_key)  # pure: its InvalidInput comes before any network I/O
        response = _client.post_mail_send(self.sdk, stamped, self.timeout)
        _rules.check_accepted(getattr(response, "status_code", None), _client.x_message_id(response), stamped)
        return response

    def classify(self, error: BaseException) -> Verdict:
        return _rules.classify(error)

    def result_id(self, response: Any) -> str | None:
        return _client.x_message_id(response)

    def response_digest(self, response: Any) -> str:
        return _client.digest_response(response)

    def lookup(self, record: EffectRecord) -> LookupResult:
        """Found in Email Activity confirms; not found proves nothing (lag, retention, add-on missing)."""
        query = _rules.activity_query(record.tenant, record.intent_key)
        skipped = self._skip_reason(record)
        if skipped is not None:
            return LookupResult(LookupStatus.INCONCLUSIVE, "activity_api", detail={"skipped": skipped})
        try:
            answer = _client.get_messages(self.sdk, query, self.timeout)
        except Exception as error:  # 403 without the add-on, 401, 429, 5xx, transport: nothing learned
            verdict = _rules.classify(error)
            # counted apart from "not indexed yet": the reconciler reports an error, its alert fires
            return LookupResult(
                LookupStatus.INCONCLUSIVE, LOOKUP_ERROR, detail={"error": verdict.error_code or "error"}
            )
        messages = answer.get("messages") if isinstance(answer, dict) else None
        found = [m for m in messages or [] if isinstance(m, dict) and isinstance(m.get("msg_id"), str)]
        if not found:
            return LookupResult(LookupStatus.INCONCLUSIVE, "activity_api", detail={"matches": 0})
        msg_id = found[0]["msg_id"]
        return LookupResult(
            LookupStatus.FOUND,
            "activity_api",
            provider_result_id=_rules.message_id_of(msg_id),
            evidence=f"sendgrid:activity:{msg_id}",
            detail={"matches": len(found), "status": str(found[0].get("status"))},
        )

    def deploy_check(self, env: Mapping[str, str]) -> DeployCheck:
        """The Email Activity API answers (when the lookup is on), and the Event Webhook posts what settles a lost
        send to ``SENDGRID_WEBHOOK_URL``, signed with ``SENDGRID_WEBHOOK_PUBLIC_KEY`` when that is set. Reads only."""
        checked: list[str] = []
        problems: list[str] = []
        unchecked: list[str] = []
        if not self.activity_lookup:
            unchecked.append(
                "the Email Activity lookup is off (SENDGRID_ACTIVITY_LOOKUP=false): webhook events alone settle"
            )
        else:
            try:
                query = _rules.activity_query(DEFAULT_TENANT, "safe-effects:deploy:check:v1")
                _client.get_messages(self.sdk, query, self.timeout)
            except (HTTPError, OSError) as refused:
                problems.append(
                    f"the Email Activity API refused a search ({_refusal(refused)}): every lookup of a lost send "
                    "is an error; an account without the add-on sets SENDGRID_ACTIVITY_LOOKUP=false"
                )
            else:
                checked.append("the Email Activity API answers a search: a lost send is looked up there")
        url = env.get(WEBHOOK_URL_ENV)
        if not url:
            unchecked.append(
                f"{WEBHOOK_URL_ENV} is not set: set it to the Event Webhook endpoint's address to check it"
            )
            return DeployCheck(_rules.PROVIDER, tuple(checked), tuple(problems), tuple(unchecked))
        public_key = env.get(WEBHOOK_KEY_ENV) or None
        if public_key is None:
            unchecked.append(f"{WEBHOOK_KEY_ENV} is not set: whether the webhook signs with the endpoint's key")
        try:
            setup = check_event_webhook(self.sdk, url, public_key=public_key)
        except (HTTPError, OSError) as refused:
            problems.append(f"SendGrid did not show its Event Webhook settings ({_refusal(refused)})")
        else:
            problems += setup.problems
            if setup.ok:
                checked.append(f"the Event Webhook posts {', '.join(sorted(setup.events))} events to {url}")
        return DeployCheck(_rules.PROVIDER, tuple(checked), tuple(problems), tuple(unchecked))

    def _skip_reason(self, record: EffectRecord) -> str | None:
        """Why not to query now: add-on off, a key the query syntax cannot quote, or the rate limit."""
        if not self.activity_lookup:
            return "activity lookup disabled"
        if any(c in record.intent_key for c in '"\\'):
            return "intent key has characters the activity query cannot quote"
        with self._lookup_lock:
            now = time.monotonic()
            if now - self._last_lookup < self.lookup_min_interval:
                return "activity API rate limit (6/min) kept locally"
            self._last_lookup = now
        return None


def _refusal(error: HTTPError | OSError) -> str:
    """``HTTP 403`` for SendGrid's answer, the class and message for a transport failure."""
    status = getattr(error, "status_code", None)
    return f"HTTP {status}" if status is not None else f"{type(error).__name__}: {error}"
