"""The characters a stored string must not carry into an output as they are.

Stored strings (task types, models, run ids, services, ...) come from whoever sent spans. A
control character or a bidi override in one would reach a terminal (``ESC[2J`` clears the
screen, U+202E reverses what follows) or a Prometheus exposition (``\\x00``, ``\\r`` and the
bidi controls pass prometheus-client unescaped) and act there. One table, used by the CLI's
escaping step (``budgetlens.cli._terminal``) and the collector's label cleaning
(``budgetlens.ingest.metrics.LabelCap``):

the C0 and C1 control characters and DEL (Unicode category Cc, newline and tab included), the
bidi controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and the line and
paragraph separators (U+2028, U+2029). Everything else, other non-ASCII text included, is safe.
"""

from __future__ import annotations

import re

#: The unsafe characters as a regular-expression character class body (see the module docstring).
UNSAFE_CHARS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
#: Matches one unsafe character.
UNSAFE = re.compile(f"[{UNSAFE_CHARS}]")
