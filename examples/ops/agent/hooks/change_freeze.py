#!/usr/bin/env python3
# ---
# events: [tool.before]
# timeout: 5s
# env: [EVE_FREEZE_PRODUCTION]
# ---
"""A blocking hook: deny production restarts while a change freeze is on.

Reads the call on stdin, answers allow or deny on stdout. If this hook crashes, the call is denied
(fail-closed).
"""
import json
import os
import sys

call = json.load(sys.stdin)
frozen = os.environ.get("EVE_FREEZE_PRODUCTION", "1") == "1"
if call["tool"] == "restart_service" and call["input"].get("environment") == "production" and frozen:
    print(json.dumps({"decision": "deny", "reason": "production is in a change freeze"}))
else:
    print(json.dumps({"decision": "allow"}))
