"""What never reaches memory as written.

    redaction.py  secrets and personal data masked (memory text and log lines)
    scanner.py    which rules may match a text: their patterns in one Hyperscan scan
    masking.py    `privacy.extra_patterns` masked at the one boundary before any layer
    clipping.py   text that may hold a secret cut short: masked first, never cut inside
                  a mask
"""
