#!/bin/sh
# ---
# description: Restart one service.
# effect: idempotent
# approval: once
# input:
#   type: object
#   properties:
#     service: {type: string, enum: [api, worker, db]}
#     environment: {type: string, enum: [staging, production]}
#   required: [service, environment]
# ---
# A real tool would call the orchestrator with $EVE_IDEMPOTENCY_KEY so a retried restart is one restart.
input=$(cat)
echo "{\"restarted\": $input, \"key\": \"$EVE_IDEMPOTENCY_KEY\"}"
