"""A separate worker process: one wrapped SESv2 send for an intent, its answer printed as JSON."""

from __future__ import annotations

import json
import sys


def main(store_url: str, endpoint: str, intent_key: str) -> None:
    import ses_safe
    from safe_effects import Ledger, SafeEffectsError

    ledger = Ledger.open(store_url)
    client = ses_safe.client(
        "sesv2",
        ledger=ledger,
        region_name="us-east-1",
        endpoint_url=endpoint,
        configuration_set="safe-effects",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        read_timeout=10.0,
    )
    email = {
        "FromEmailAddress": "sender@example.com",
        "Destination": {"ToAddresses": ["customer@example.com"]},
        "Content": {"Simple": {"Subject": {"Data": "Your invoice"}, "Body": {"Text": {"Data": "Thanks."}}}},
    }
    try:
        answer = client.send_email(IntentKey=intent_key, **email)
        print(json.dumps({"MessageId": answer["MessageId"], "FromLedger": answer["SafeEffects"]["FromLedger"]}))
    except SafeEffectsError as error:
        print(json.dumps({"error": error.code}))
    finally:
        ledger.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
