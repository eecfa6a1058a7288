"""Checks that every fixture listed in SOURCES.md is, byte for byte, the contents of a code block
of the eve documentation file it names. usage: python3 as-printed.py SOURCES.md FIXTURES DOCS"""
import re
import sys

sources, fixtures, docs = sys.argv[1:4]
rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)`", open(sources).read(), re.M)
bad = 0
for fixture, doc in rows:
    text = open(f"{docs}/{doc}").read()
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```$", text, re.M | re.S)
    mine = open(f"{fixtures}/{fixture}").read()
    if mine not in blocks:
        print(f"{fixture}: not a code block of {doc}", file=sys.stderr)
        bad += 1
if bad or not rows:
    sys.exit(1)
print(f"{len(rows)} fixtures are code blocks of eve's docs, as printed")
