#!/usr/bin/env python3
# ---
# description: Fetch the invoice of an order.
# effect: read
# input:
#   type: object
#   properties:
#     order_id: {type: string}
#   required: [order_id]
# ---
import json
import sys

order_id = json.load(sys.stdin)["order_id"]
print(json.dumps({"order_id": order_id, "lines": [{"item": "Widget", "eur": 35.42}], "vat_eur": 7.08}))
