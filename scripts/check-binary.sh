#!/usr/bin/env bash
# Checks what the `eve` binary links against, so the claim in README.md and docs/operations.md
# stays true: a dynamically linked x86_64 PIE that needs only the C library's own parts (libc,
# libm, libgcc_s and the dynamic loader), every other dependency (SQLite, TLS, compression) being
# compiled in. Fails when a new shared library appears. Prints the newest glibc symbol version the
# binary needs, which is the oldest glibc it runs on.
#
#   scripts/check-binary.sh [PATH]     (default: target/release/eve, else target/debug/eve)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-}"
if [ -z "$BIN" ]; then
    for candidate in target/release/eve target/debug/eve; do
        if [ -x "$candidate" ]; then BIN="$candidate"; break; fi
    done
fi
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "error: no eve binary to check: build one (cargo build -p eve-cli) or pass its path" >&2; exit 1; }
command -v readelf >/dev/null || { echo "error: readelf not found: install binutils" >&2; exit 1; }

ALLOWED="libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 ld-linux-aarch64.so.1"
needed=$(readelf -d "$BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
status=0
for lib in $needed; do
    case " $ALLOWED " in
        *" $lib "*) ;;
        *) echo "error: $BIN needs $lib, which README.md and docs/operations.md do not list: link it statically or document it" >&2; status=1 ;;
    esac
done
glibc=$(readelf -W --dyn-syms "$BIN" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -u -t. -k1,1 -k2,2n -k3,3n | tail -n 1)
printf '%s: %s\n' "$BIN" "$(file -b "$BIN" | cut -d, -f1-2)"
printf 'needs: %s\n' "$(echo $needed)"
printf 'newest glibc symbol: %s\n' "${glibc:-none}"
exit $status
