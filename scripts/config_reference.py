"""Render docs/configuration.md from the settings and config.example.yaml.

The example file is the settings in annotated form (tests hold it to `Settings`); this
turns its comments into a reference table, one row per setting, with the environment
variable that sets it. From the repository's root:

    python scripts/config_reference.py > docs/configuration.md
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from memoryd.config import Settings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "config.example.yaml"

#: `key: value  # note`, or the same commented out (`# key: value`, an unset setting).
_KEY = re.compile(r"^(?P<indent> *)(?P<unset># )?(?P<key>[a-z_]+):(?P<rest>(?: .*)?)$")


@dataclass
class Row:
    path: str
    value: str
    meaning: list[str]
    group: bool = False  # a key whose settings are below it (`memory:`)


def setting_paths(model: type[BaseModel] = Settings, prefix: str = "") -> list[str]:
    """Every setting's dotted path, the fields of nested settings included."""
    paths = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            paths.extend(setting_paths(kind, f"{prefix}{name}."))
        else:
            paths.append(prefix + name)
    return paths


def _value_and_note(rest: str) -> tuple[str, str]:
    """A line's value and its trailing comment (a `#` after a blank, outside quotes)."""
    quote = None
    for at, char in enumerate(rest):
        if char in "'\"" and quote in (None, char):
            quote = None if quote else char
        elif char == "#" and quote is None and (at == 0 or rest[at - 1] == " "):
            return rest[:at].strip(), rest[at + 1:].strip()
    return rest.strip(), ""


def read_example(text: str, known: set[str]) -> tuple[list[str], list[Row]]:
    """The example's opening comment, and a row for each setting and each group of
    settings (commented-out settings too)."""
    lines = text.splitlines()
    intro: list[str] = []
    while lines and lines[0].startswith("#"):
        intro.append(lines.pop(0)[2:])
    rows: list[Row] = []
    parents: list[tuple[int, str]] = []
    comment: list[str] = []
    note_column = -1  # where the last key's trailing comment began: its continuation
    for line in lines:
        if not line.strip():
            comment, note_column = [], -1
            continue
        key = _KEY.match(line)
        if key is not None and key["unset"]:
            within = ".".join([*(name for at, name in parents if at < len(key["indent"])),
                               key["key"]])
            key = key if within in known else None
        if key is None:
            text_at = len(line) - len(line.lstrip())
            words = line.strip()[1:]
            if text_at >= note_column > 0 and rows:
                rows[-1].meaning.append(words.strip())
            elif words.startswith(" ") and not words.startswith(("  ", " - ")):
                comment.append(words.strip())
            continue
        indent = len(key["indent"])
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = ".".join([*(name for _, name in parents), key["key"]])
        value, note = _value_and_note(key["rest"])
        note_column = line.index("#", len(key["indent"]) + 1) if note else -1
        if not value and not key["unset"]:
            parents.append((indent, key["key"]))
        if not any(row.path == path for row in rows):
            shown = f"unset (e.g. `{value}`)" if key["unset"] else f"`{value}`" if value else ""
            rows.append(Row(path, shown, [*comment, *([note] if note else [])],
                            group=path not in known and not value))
        comment = []
    return intro, rows


def environment_name(path: str) -> str:
    return "MEMORYD_" + path.upper().replace(".", "__")


def _table(rows: list[Row]) -> list[str]:
    out = ["| setting | environment variable | default | meaning |", "|---|---|---|---|"]
    for row in rows:
        meaning = " ".join(row.meaning).replace("|", "\\|")
        value = row.value.replace("|", "\\|") or "see `config.example.yaml`"
        out.append(f"| `{row.path}` | `{environment_name(row.path)}` | {value} | {meaning} |")
    return [*out, ""]


def render(text: str) -> str:
    """The reference page: the general settings, then one section for each group."""
    known = setting_paths()
    intro, rows = read_example(text, set(known))
    missing = [path for path in known if path not in {row.path for row in rows}]
    if missing:
        raise SystemExit(f"config.example.yaml does not describe: {', '.join(missing)}")
    unexplained = [row.path for row in rows if not row.meaning and row.path in known]
    if unexplained:
        raise SystemExit(f"config.example.yaml does not explain: {', '.join(unexplained)}")
    out = [
        "# Configuration", "",
        "<!-- Generated from memoryd's settings and config.example.yaml by",
        "     scripts/config_reference.py: edit those, then run it. -->", "",
        "memoryd works without a configuration file: every setting is optional.",
        "`config.example.yaml` is this reference as an annotated file to copy to",
        "`~/.config/memoryd/config.yaml`.", "",
        " ".join(line.strip() for line in intro if line.strip()), "",
        "## General", "",
        *_table([row for row in rows if "." not in row.path and row.path in known]),
    ]
    for group in (row for row in rows if row.group):
        depth = group.path.count(".")
        settings = [row for row in rows if row.path in known
                    and row.path.rsplit(".", 1)[0] == group.path and "." in row.path]
        out += ["#" * min(depth + 2, 4) + f" `{group.path}`", ""]
        if group.meaning:
            out += [" ".join(group.meaning), ""]
        if settings:
            out += _table(settings)
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(EXAMPLE.read_text("utf-8")))
