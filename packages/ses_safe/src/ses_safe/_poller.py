"""A small SQS consumer for SES events: receive, ingest, delete, bounded per call.

Without ``signatures`` the queue is trusted (see ``_events``), so restrict its policy to your SES topic; either
way, name that topic in ``expected_topic_arns`` so a message from any other is refused.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception_type, wait_exponential

from safe_effects import Ledger, LedgerUnavailable

from ._events import IngestResult, UntrustedTopic, checked_topics, ingest_event
from ._sns_signature import SnsCertificateUnavailable, SnsSignatureInvalid, SnsSignatures

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger("ses_safe")
ERROR = "error"  # the counter key for messages left on the queue because ingesting them raised
UNTRUSTED = "untrusted_topic"  # the counter key for messages from a topic not expected: kept, nothing recorded
BAD_SIGNATURE = "sns_signature_invalid"  # the counter key for messages whose SNS signature fails: kept, likewise
# what poll_once warned of, naming the message, before it raised it (see poll_once)
_WARNED_IN_BATCH = (LedgerUnavailable, SnsCertificateUnavailable)


class SQSEventPoller:
    """Drain an SQS queue subscribed (through SNS) to an SES configuration set's event destination."""

    def __init__(
        self,
        ledger: Ledger,
        sqs: SQSClient,
        queue_url: str,
        *,
        batch_size: int = 10,
        wait_seconds: int = 0,
        visibility_timeout: int | None = None,
        expected_topic_arns: Collection[str] | None = None,
        signatures: SnsSignatures | None = None,
    ) -> None:
        """``expected_topic_arns`` and ``signatures``: see :func:`ingest_event`. A message from another topic is
        counted under ``"untrusted_topic"``, one whose signature fails under ``"sns_signature_invalid"``; either
        is logged and left on the queue: a typo in the ARNs would otherwise delete every genuine event for good
        (SES has no lookup to recover them), and a forgery is worth keeping. Give the queue a redrive policy, so
        such messages move to its dead-letter queue after a few receives, to be replayed once the setting is
        fixed."""
        self._ledger = ledger
        self._topics = checked_topics(expected_topic_arns)
        self._signatures = signatures
        self._sqs = sqs
        self._queue_url = queue_url
        self._batch_size = min(max(batch_size, 1), 10)  # SQS's own bounds
        self._wait_seconds = wait_seconds
        self._visibility_timeout = visibility_timeout
        self.counts: Counter[str] = Counter()

    def poll_once(self) -> list[IngestResult]:
        """One receive call; each message is ingested and deleted, unless ingesting it raised or its topic is not
        expected (then it is redelivered, or moved to the queue's dead-letter queue by its redrive policy).

        A ledger that does not answer (:class:`LedgerUnavailable`) stops the batch at the first message that
        meets it, logged once, and is raised once the messages ingested before it are deleted: the rest would
        each wait and fail alike, and a loop that received again at once would count receives against every
        message until the dead-letter queue took them all (``run`` backs off instead). A message whose SNS
        certificate cannot be fetched now is left on the queue and the batch goes on, since the others' may be
        cached (one message naming a certificate URL that does not exist would otherwise hold back every
        genuine event behind it until the dead-letter queue took them); the first such failure is raised at the
        batch's end, so that ``run`` backs off as for an outage."""
        options: dict[str, Any] = {
            "QueueUrl": self._queue_url,
            "MaxNumberOfMessages": self._batch_size,
            "WaitTimeSeconds": self._wait_seconds,
        }
        if self._visibility_timeout is not None:
            options["VisibilityTimeout"] = self._visibility_timeout
        results: list[IngestResult] = []
        uncertified: SnsCertificateUnavailable | None = None  # raised once the batch is through
        for message in self._sqs.receive_message(**options).get("Messages", []):
            try:
                body = message.get("Body", "")
                result = ingest_event(self._ledger, body, expected_topic_arns=self._topics, signatures=self._signatures)
            except (UntrustedTopic, SnsSignatureInvalid) as refused:
                log.error("SES event %s refused, left on the queue: %s", message.get("MessageId"), refused)
                self.counts[UNTRUSTED if isinstance(refused, UntrustedTopic) else BAD_SIGNATURE] += 1
                continue
            except SnsCertificateUnavailable as missing:
                log.warning("SES event %s not ingested, left on the queue: %s", message.get("MessageId"), missing)
                self.counts[ERROR] += 1
                uncertified = uncertified or missing
                continue
            except LedgerUnavailable as down:
                log.warning("SES events not ingested, left on the queue from %s on: %s", message.get("MessageId"), down)
                self.counts[ERROR] += 1
                raise
            except Exception:
                log.exception("SES event %s not ingested; left on the queue", message.get("MessageId"))
                self.counts[ERROR] += 1
                continue
            self.counts[result.outcome.value] += 1
            results.append(result)
            self._sqs.delete_message(QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"])
        if uncertified is not None:
            raise uncertified
        return results

    def run(self, stop: threading.Event | None = None, *, min_wait: float = 1.0, max_wait: float = 60.0) -> None:
        """Poll until ``stop`` is set (for good without one): the poller's main loop.

        A poll that fails (SQS unreachable or throttling, credentials expired, the ledger not answering) is logged
        and made again after a pause that doubles from ``min_wait`` up to ``max_wait`` seconds: an outage never
        ends the poller, and the events wait on the queue meanwhile. With short polling (``wait_seconds=0``) an
        empty receive pauses ``min_wait`` too, rather than call SQS in a tight loop.
        """
        stop = stop or threading.Event()

        def pause(seconds: float) -> None:  # ended early by ``stop``
            stop.wait(seconds)

        retrying = Retrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(multiplier=min_wait, max=max_wait),
            stop=lambda _: stop.is_set(),
            sleep=pause,
            before_sleep=self._log_failed_poll,
        )

        def poll() -> list[IngestResult]:  # a pause that ``stop`` ended polls no more
            return [] if stop.is_set() else self.poll_once()

        while not stop.is_set():
            try:
                results = retrying(poll)
            except RetryError:  # stopped while waiting to poll again
                return
            if not results and self._wait_seconds == 0:
                pause(min_wait)

    def _log_failed_poll(self, state: RetryCallState) -> None:
        """One warning per failed poll: an outage ``poll_once`` met mid-batch was warned of there, with the
        message it stopped at, so the pause before the next poll is only information."""
        assert state.outcome is not None  # tenacity sets both before it sleeps
        assert state.next_action is not None
        failure = state.outcome.exception()
        level = logging.INFO if isinstance(failure, _WARNED_IN_BATCH) else logging.WARNING
        log.log(
            level, "polling SQS queue %s for SES events failed (%r); polling again in %.1f s",
            self._queue_url, failure, state.next_action.sleep,
        )  # fmt: skip

    def drain(self, *, max_batches: int = 10) -> list[IngestResult]:
        """Poll until a receive comes back empty or ``max_batches`` receives were made."""
        results: list[IngestResult] = []
        for _ in range(max_batches):
            batch = self.poll_once()
            results += batch
            if not batch:
                break
        return results
