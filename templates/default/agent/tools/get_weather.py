#!/usr/bin/env python3
# ---
# description: Get the current weather for a city.
# effect: read
# timeout: 10s
# input:
#   type: object
#   properties:
#     city:
#       type: string
#       description: City name, e.g. Paris
#   required: [city]
# ---
"""A script tool: the input arrives as JSON on stdin; JSON on stdout is the result."""
import json
import sys

args = json.load(sys.stdin)
city = args["city"]
# A real tool would call a weather API here.
print(json.dumps({"city": city, "condition": "Sunny", "temperatureC": 22}))
