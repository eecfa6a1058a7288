#!/bin/sh
# ---
# description: Current product metrics (sign-ups, error rate, p95 latency) and yesterday's.
# effect: read
# timeout: 5s
# ---
cat <<'JSON'
{"today": {"signups": 128, "error_rate": 0.004, "p95_ms": 210},
 "yesterday": {"signups": 117, "error_rate": 0.006, "p95_ms": 230}}
JSON
