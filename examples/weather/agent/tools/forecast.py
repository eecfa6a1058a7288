#!/usr/bin/env python3
# ---
# description: Today's forecast for a city (condition, high and low in °C).
# effect: read
# timeout: 10s
# input:
#   type: object
#   properties:
#     city: {type: string, description: "City name, e.g. Paris"}
#   required: [city]
# ---
"""A Python script tool: JSON input on stdin, JSON result on stdout.

A real tool would call a weather service; this one derives a stable forecast from the name so the
example runs offline.
"""
import hashlib
import json
import sys

city = json.load(sys.stdin)["city"].strip()
if not city:
    print("city must not be empty", file=sys.stderr)
    sys.exit(2)
seed = int(hashlib.sha256(city.lower().encode()).hexdigest(), 16)
conditions = ["sunny", "cloudy", "light rain", "windy", "snow showers"]
high = 5 + seed % 25
print(json.dumps({"city": city, "condition": conditions[seed % len(conditions)],
                  "high_c": high, "low_c": high - 4 - seed % 6}))
