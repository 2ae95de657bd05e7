#!/bin/sh
# Every benchmark with its defaults, one after the other (about 6 minutes on 2 cores).
# Extra arguments go to none of them; run a benchmark on its own to change its size.
set -eu
cd "$(dirname "$0")/.."
echo "== nproc: $(nproc 2>/dev/null || echo ?), $(python --version 2>&1)"
echo "== backfill (issue 2, section 9)"
python -m benchmarks.backfill
echo
echo "== live latency (issue 2, section 9)"
python -m benchmarks.latency
echo
echo "== recovery (issue 3, section 6)"
python -m benchmarks.recovery
echo
echo "== hook latency, whole processes (issue 13)"
python -m benchmarks.hooks
