"""Read and reset a moto server over its own HTTP API, so tests need no moto internals."""

from __future__ import annotations

import json
import urllib.request
from typing import Any


def moto_sent_messages(moto_url: str) -> list[dict[str, Any]]:
    """Every email the moto server accepted since its last reset (simple and raw, v1 and v2)."""
    with urllib.request.urlopen(f"{moto_url}/moto-api/data.json") as answer:
        ses = json.load(answer).get("ses", {})
    return [*ses.get("Message", []), *ses.get("RawMessage", [])]


def reset_moto(moto_url: str) -> None:
    """Empty every moto backend (sent messages, identities, queues)."""
    request = urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request):
        pass
