"""What never reaches memory as written.

    redaction.py  secrets and personal data masked (memory text and log lines)
    secret_rules.py  the secret rules: memoryd's own and detect-secrets' plugins, their markers
    personal.py   personal data's patterns and checks (cards, IBANs, national ids, ...)
    scanner.py    which rules may match a text: their patterns in one Hyperscan scan
    masking.py    `privacy.extra_patterns` masked at the one boundary before any layer
    clipping.py   text that may hold a secret cut short: masked first, never cut inside
                  a mask
"""
