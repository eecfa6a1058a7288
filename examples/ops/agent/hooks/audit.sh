#!/bin/sh
# ---
# events: [action.result, turn.completed]
# timeout: 5s
# ---
# An observe hook: runs after each event is stored, at least once. The event id de-duplicates.
event=$(cat)
mkdir -p audit
printf '%s\n' "$event" >> audit/events.ndjson
