#!/usr/bin/env python3
# ---
# description: Look up an order by id.
# effect: read
# input:
#   type: object
#   properties:
#     order_id: {type: string, description: "Order id such as A-1001"}
#   required: [order_id]
# ---
import json
import sys

order_id = json.load(sys.stdin)["order_id"]
print(json.dumps({"order_id": order_id, "status": "shipped", "total_eur": 42.5}))
