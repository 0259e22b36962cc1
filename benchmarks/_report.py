"""Write one benchmark's section of BENCHMARKS.md, leaving the other sections as they are."""

from __future__ import annotations

import os
import platform
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
_HEADER = (
    "# Benchmarks\n\n"
    "Figures written by the scripts in `benchmarks/` (each rewrites only its own section).\n"
    "Targets are compared as ratios measured in the same run where the issue asks for one.\n"
)


def machine() -> str:
    """One line describing the machine the figures were measured on."""
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_section(name: str, markdown: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace the section ``name`` of BENCHMARKS.md with ``markdown`` (appended if new)."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    text = path.read_text() if path.exists() else _HEADER
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def publish(name: str, markdown: str, write: bool = True) -> None:
    """Print a benchmark's section and, unless ``write`` is False, store it in BENCHMARKS.md."""
    print(markdown)
    if write:
        write_section(name, markdown)
