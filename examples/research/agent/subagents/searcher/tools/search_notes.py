#!/usr/bin/env python3
# ---
# description: Search the research notes by keyword.
# effect: read
# input:
#   type: object
#   properties:
#     query: {type: string}
#   required: [query]
# ---
import json
import sys

NOTES = {
    "WAL": "SQLite's write-ahead log lets readers run while one writer commits.",
    "fsync": "fsync forces written data to stable storage; it is the cost of durability.",
    "idempotency": "An idempotency key lets a retried request take effect once.",
}
query = json.load(sys.stdin)["query"].lower()
hits = [{"title": t, "text": x} for t, x in NOTES.items() if query in (t + " " + x).lower()]
print(json.dumps({"query": query, "hits": hits}))
