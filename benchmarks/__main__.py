"""`python -m benchmarks`: every benchmark with its defaults (as run_all.sh does).

`python -m benchmarks --quick` runs each at a reduced size, in about two minutes.
"""

from __future__ import annotations

import sys

from benchmarks import backfill, hooks, latency, recovery
from benchmarks._common import machine


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    print(f"== {machine()}{' (quick sizes)' if quick else ''}")
    print("\n== backfill (issue 2, section 9)")
    backfill.main(["--mb", "50"] if quick else [])
    print("\n== live latency (issue 2, section 9)")
    latency.main(["--seconds", "10"] if quick else [])
    print("\n== recovery (issue 3, section 6)")
    recovery.main(["--quick"] if quick else [])
    print("\n== hook latency, whole processes (issue 13)")
    hooks.main(["--memories", "10000", "--prompts", "50"] if quick else [])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
