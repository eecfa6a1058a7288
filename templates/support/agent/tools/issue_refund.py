#!/usr/bin/env python3
# ---
# description: Refund an order, fully or partly. A human approves every refund.
# approval: always
# effect: idempotent
# input:
#   type: object
#   properties:
#     order_id: {type: string}
#     amount_eur: {type: number, exclusiveMinimum: 0}
#     reason: {type: string}
#   required: [order_id, amount_eur, reason]
# ---
import json
import os
import sys

args = json.load(sys.stdin)
# EVE_IDEMPOTENCY_KEY is stable across retries of this call: pass it to the payment provider.
print(json.dumps({"refunded": args["amount_eur"], "order_id": args["order_id"],
                  "idempotency_key": os.environ.get("EVE_IDEMPOTENCY_KEY")}))
