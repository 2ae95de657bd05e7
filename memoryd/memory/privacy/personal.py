"""Personal data as memory masks it: e-mail addresses, phone numbers, payment cards
(Luhn), IBANs (mod 97), IP addresses and national identity numbers, each pattern with
its check (pure; applied by `redaction`, where the scanner says one may match)."""

from __future__ import annotations

import re

EMAIL_RE = re.compile(r"(?<![\w.+\-])[A-Za-z0-9][A-Za-z0-9._%+\-]*@[A-Za-z0-9](?:[A-Za-z0-9\-]*"
                    r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b"
                    r"(?!:)(?![.\-]?\w)")  # not git@host:repo (SSH), not a longer name
# +49 30 1234567, (555) 123-4567, 555-123-4567, 555.123.4567; not dates, versions or ids.
PHONE_RE = re.compile(r"(?<![\w+.\-])(?:\+\d{1,3}[ .\-]?(?:\(\d{1,4}\)[ .\-]?)?\d{1,4}"
                    r"(?:[ .\-]?\d{2,4}){2,4}|\(\d{3}\)[ .\-]?\d{3}[ .\-]\d{4}"
                    r"|\d{3}[.\-]\d{3}[.\-]\d{4})(?![\w.\-]*\d)")
# 13-19 digits run together, or grouped as cards print them (4-4-4-x, Amex 4-6-5).
CARD_RE = re.compile(r"(?<![\d\-.])(?:\d{13,19}|\d{4}([ \-])\d{4}\1\d{4}\1\d{1,7}"
                   r"|\d{4}([ \-])\d{6}\2\d{5})(?![\d\-]|\.\d)")
#: A US social security number as written (area never 000, 666 or 9xx).
SSN_RE = re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])")
IBAN_RE = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
_IPV4 = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}"
                   r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.]*\d)")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])"
                   r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}:){0,5}"
                   r"[0-9A-Fa-f]{1,4}(?![\w:])")
#: Every byte but an ASCII digit's: what is left of a text's UTF-8 once these are deleted
#: is its digits (no other character's bytes include one).
NOT_DIGITS_RE = bytes(b for b in range(256) if not 0x30 <= b <= 0x39)
#: Addresses that name no one: loopback, unspecified, documentation-free local ones.
_HARMLESS_IPS = frozenset({"127.0.0.1", "0.0.0.0", "255.255.255.255", "::1"})


#: A doubled digit's digit sum, for each ASCII digit ("7" -> 14 -> "5").
_DOUBLED = str.maketrans("0123456789", "0246813579")


def _luhn(digits: str) -> bool:
    if digits.isascii():  # byte sums in C: a text of long numbers has many to check
        doubled = digits[-2::-2].translate(_DOUBLED)
        total = sum(digits[-1::-2].encode()) + sum(doubled.encode()) - 48 * len(digits)
        return total % 10 == 0
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _iban_valid(text: str) -> bool:
    compact = text.replace(" ", "")
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return 15 <= len(compact) <= 34 and int(number) % 97 == 1


_NOT_DIGIT = re.compile(r"\D")


def mask_card(match: re.Match[str]) -> str:
    found = match.group(0)
    digits = found if found.isdigit() else _NOT_DIGIT.sub("", found)
    real = 13 <= len(digits) <= 19 and len(set(digits)) > 1 and _luhn(digits)
    return "[REDACTED:card]" if real else match.group(0)


def mask_iban(match: re.Match[str]) -> str:
    return "[REDACTED:iban]" if _iban_valid(match.group(0)) else match.group(0)


def mask_ip(match: re.Match[str]) -> str:
    return match.group(0) if match.group(0) in _HARMLESS_IPS else "[REDACTED:ip]"


# National identity numbers beside the US SSN, each as it is written and, where it has
# one, with its check digit or letter verified (a random number rarely passes).
#: United Kingdom National Insurance number: AB 12 34 56 C.
NINO_RE = re.compile(r"(?<![A-Za-z0-9])(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]"
                   r" ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![A-Za-z0-9])")
#: Spain's DNI (8 digits and a letter) and NIE (X, Y or Z, 7 digits, a letter).
DNI_RE = re.compile(r"(?<![A-Za-z0-9])([XYZ]?)(\d{7,8})-?([A-Z])(?![A-Za-z0-9])")
_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
#: Brazil's CPF as printed: 123.456.789-09.
CPF_RE = re.compile(r"(?<![\d.])(\d{3})\.(\d{3})\.(\d{3})-(\d{2})(?![\d-])")
#: Canada's SIN as printed, 3-3-3 with dashes or spaces (Luhn).
SIN_RE = re.compile(r"(?<![\d-])(\d{3})([ \-])(\d{3})\2(\d{3})(?![\d-])")
#: India's Aadhaar as printed, 4-4-4 (Verhoeff; never starts with 0 or 1).
AADHAAR_RE = re.compile(r"(?<![\d-])([2-9]\d{3})([ \-])(\d{4})\2(\d{4})(?![\d-])")
#: Italy's codice fiscale: six letters, two digits, a month letter, two digits, a letter,
#: three digits, a check letter.
FISCAL_CODE_RE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{6}\d{2}[A-EHLMPRST]\d{2}[A-Z]\d{3}[A-Z]"
                          r"(?![A-Za-z0-9])")
_VERHOEFF_D = [[(i + j) % 5 + 5 * ((i // 5 + j // 5) % 2) if i < 5 and j < 5 else 0
                for j in range(10)] for i in range(10)]


def _verhoeff(number: str) -> bool:
    mult = ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 4, 0, 6, 7, 8, 9, 5),
            (2, 3, 4, 0, 1, 7, 8, 9, 5, 6), (3, 4, 0, 1, 2, 8, 9, 5, 6, 7),
            (4, 0, 1, 2, 3, 9, 5, 6, 7, 8), (5, 9, 8, 7, 6, 0, 4, 3, 2, 1),
            (6, 5, 9, 8, 7, 1, 0, 4, 3, 2), (7, 6, 5, 9, 8, 2, 1, 0, 4, 3),
            (8, 7, 6, 5, 9, 3, 2, 1, 0, 4), (9, 8, 7, 6, 5, 4, 3, 2, 1, 0))
    perm = ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 5, 7, 6, 2, 8, 3, 0, 9, 4),
            (5, 8, 0, 3, 7, 9, 6, 1, 4, 2), (8, 9, 1, 6, 0, 4, 3, 5, 2, 7),
            (9, 4, 5, 3, 1, 2, 6, 8, 7, 0), (4, 2, 8, 6, 5, 7, 3, 9, 0, 1),
            (2, 7, 9, 3, 8, 0, 6, 4, 1, 5), (7, 0, 4, 6, 9, 1, 3, 2, 5, 8))
    check = 0
    for position, digit in enumerate(reversed(number)):
        check = mult[check][perm[position % 8][int(digit)]]
    return check == 0


def mask_dni(match: re.Match[str]) -> str:
    prefix, digits, letter = match.groups()
    if (prefix and len(digits) != 7) or (not prefix and len(digits) != 8):
        return match.group(0)
    number = int(str("XYZ".index(prefix)) + digits) if prefix else int(digits)
    return "[REDACTED:national_id]" if _DNI_LETTERS[number % 23] == letter else match.group(0)


def mask_cpf(match: re.Match[str]) -> str:
    digits = [int(c) for c in "".join(match.groups())]
    if len(set(digits)) == 1:
        return match.group(0)
    for size in (9, 10):
        total = sum(d * w for d, w in zip(digits[:size], range(size + 1, 1, -1), strict=True))
        if (total * 10 % 11) % 10 != digits[size]:
            return match.group(0)
    return "[REDACTED:national_id]"


def mask_sin(match: re.Match[str]) -> str:
    digits = match.group(1) + match.group(3) + match.group(4)
    return "[REDACTED:national_id]" if digits[0] != "0" and _luhn(digits) else match.group(0)


def mask_aadhaar(match: re.Match[str]) -> str:
    digits = match.group(1) + match.group(3) + match.group(4)
    return "[REDACTED:national_id]" if _verhoeff(digits) else match.group(0)
