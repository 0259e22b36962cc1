"""Text formatting of figures for the dashboard (pure): USD, tokens, rates, changes.

A missing value never reads as zero: unknown cost is ``"unpriced"``, an unknown rate ``"n/a"``,
an empty table cell ``MISSING`` (an em dash).
"""

from __future__ import annotations

import math

from budgetlens.analysis.views import is_missing
from budgetlens.unsafe_text import UNSAFE

#: What a table cell or a label shows for a missing value (never ``None``, ``nan`` or ``<NA>``).
MISSING = "—"
#: The label of a preset key whose runs ran without such a limit, and of one with no data.
NO_CURRENT_LIMIT = "no current limit"
NO_DATA = "no data"


_missing = is_missing  # the analysis wing's one rule (None, NaN, NaT, pd.NA)


#: Significant figures of a cost below $1, as the CLI's tables print costs (``TABLE_COST_DIGITS``).
USD_DIGITS = 4


def format_usd(value: float | None, *, unpriced: str = "unpriced", digits: int = USD_DIGITS) -> str:
    """A cost in USD as text, by the CLI's rule: enough significant figures, never ``$0.00`` for
    a non-zero value.

    From $1 up: cents with thousands separators (``$1,234.50``). Below $1: ``digits``
    significant figures with trailing zeros dropped down to cents (``$0.0039``, ``$0.014``,
    ``$0.44``, ``$0.009165``, ``$0.50``). Exactly 0 is ``$0.00``. ``unpriced`` (default
    ``"unpriced"``) when ``value`` is None/NaN/NA.
    """
    if value is None or _missing(value):
        return unpriced
    value = float(value)
    if value == 0:
        return "$0.00"
    if abs(value) >= 1:
        return f"${value:,.2f}"
    decimals = max(2, digits - 1 - math.floor(math.log10(abs(value))))
    body = f"{abs(value):.{decimals}f}"
    if abs(float(body)) >= 1:  # 0.99996 rounds up to 1.000
        body = f"{abs(value):.2f}"
    whole, frac = body.split(".")
    frac = frac.rstrip("0").ljust(2, "0")
    return f"{'-' if value < 0 else ''}${whole}.{frac}"


def format_tokens(value: float | None) -> str:
    """Tokens with a K/M suffix (``12.3K``, ``1.20M``), ``n/a`` when unknown."""
    if value is None or _missing(value):
        return "n/a"
    value = float(value)
    if abs(value) >= 1_000_000:
        return f"{value / 1_000_000:.2f}M"
    if abs(value) >= 10_000:
        return f"{value / 1_000:.1f}K"
    return f"{value:,.0f}"


def format_percent(value: float | None, *, none: str = "n/a") -> str:
    """A rate in 0..1 as ``12.3 %`` (one decimal, a space before the sign: the dashboard's one
    percent format), ``none`` (default ``n/a``) when there is no rate."""
    if value is None or _missing(value):
        return none
    return f"{float(value) * 100:,.1f} %"


#: What a hit-rate tile or cell shows when the runs ran without any budget limit (the hit rate
#: counts only budgeted runs, so it has no value there; never 0 %).
NO_BUDGET = "no budget"


def format_hit_rate(value: float | None, runs: int | None = None) -> str:
    """A hit rate as ``12.3 %``; when it is None: ``NO_BUDGET`` if there were ``runs`` (> 0, so
    none of them ran under a limit), else ``n/a`` (no finished run at all)."""
    if not _missing(value):
        return format_percent(value)
    return NO_BUDGET if runs else "n/a"


def format_duration(seconds: float | None) -> str:
    """A duration as a person reads it: ``0.8 s``, ``42 s``, ``3 min 29 s``, ``3 h 29 min``,
    ``2 d 4 h``; ``n/a`` when unknown (never ``12,554.2 s``)."""
    if seconds is None or _missing(seconds):
        return "n/a"
    value = float(seconds)
    if value < 10:
        return f"{value:.1f} s"
    if value < 60:
        return f"{value:.0f} s"
    total = round(value)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"


def format_compact(value: float) -> str:
    """An axis tick as ``200K``, ``1.5M``, ``950`` (no trailing ``.0``)."""
    value = float(value)
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= size:
            text = f"{value / size:.1f}".removesuffix(".0")
            return text + suffix
    return f"{value:,.0f}" if value == round(value) else f"{value:g}"


def format_change(value: float | None, current=0.0, recommended=0.0) -> str:
    """A relative change in percent as ``+76 %`` / ``-17 %``.

    When it cannot be computed the text says why: ``no data`` when there is no recommendation
    (``recommended`` missing), ``no current limit`` when the runs ran without one (``current``
    missing), else an em dash (a current limit of 0).
    """
    if _missing(recommended):
        return NO_DATA
    if _missing(current):
        return NO_CURRENT_LIMIT
    if _missing(value):
        return MISSING
    return f"{value:+.0f} %"


def text(value) -> str:
    """Any scalar as table/label text: ``MISSING`` for None/NaN/NA/NaT, else ``str(value)``."""
    return MISSING if _missing(value) else str(value)


#: Every ASCII punctuation character: CommonMark lets a backslash escape each of them, so an
#: escaped one is always shown as itself (no link, image, emphasis, code, directive, LaTeX, HTML).
_MARKDOWN_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
#: Characters before which ``safe_text`` puts a word joiner (U+2060, invisible): no autolink.
_AUTOLINK_BREAKS = frozenset(":@")
_WORD_JOINER = "\u2060"
#: Longest stored or URL-supplied string a page shows inline; the rest is cut with an ellipsis.
SAFE_TEXT_MAX_CHARS = 200


#: Characters ``safe_text`` shows as a space: line breaks and tabs (a value is one line).
_LINE_BREAKS = frozenset("\n\r\t\v\f\u2028\u2029")


def _escaped(ch: str) -> str:
    """One unsafe character as the CLI shows it: ``\\x1b``, ``\\u202e``."""
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible_text(value):
    """``value`` with every control character and bidi control (``budgetlens.unsafe_text``)
    escaped as the CLI shows it (``"a\\u202eb"`` -> ``"a\\\\u202eb"``) when it is a string, for
    plain-text outputs (table cells, chart text); anything else is returned unchanged."""
    if not isinstance(value, str):
        return value
    return UNSAFE.sub(lambda match: _escaped(match.group()), value)


def safe_text(value, *, max_chars: int = SAFE_TEXT_MAX_CHARS) -> str:
    """A stored or URL-supplied value (task type, model, service, run id, tool name, stop
    reason, tag) as markdown that shows exactly its characters and nothing else.

    Streamlit renders markdown (links, images, ``:color[...]`` directives, ``$...$`` LaTeX)
    in ``st.markdown``, captions, banners, subheaders, labels and badges, so every such string
    goes through here before it meets an f-string of markdown. Each ASCII punctuation
    character is backslash-escaped (so ``![x](http://a)``, ``[t](u)``, ``<img>`` stay text) and an
    invisible word joiner (U+2060) goes before each ``:``, ``@`` and the dot of ``www.`` (GFM
    links bare URLs and e-mail addresses even when escaped) and between two ``-`` or ``.`` in a
    row (no smart dash or ellipsis); line breaks and tabs become spaces
    (no block syntax, no header); any other control character or bidi
    control (``budgetlens.unsafe_text``, the CLI's set) is shown escaped as the CLI shows it
    (``\\u202e``: no override reverses what follows); longer than ``max_chars`` characters
    is cut with ``…``. ``MISSING`` for None/NaN/NA. Returns str; never raises.
    """
    if value is None or _missing(value):
        return MISSING
    raw = str(value)
    if len(raw) > max_chars:
        raw = raw[:max_chars] + "…"
    out = []
    for index, ch in enumerate(raw):
        if ch in _AUTOLINK_BREAKS or (ch == "." and raw[max(0, index - 3) : index].lower() == "www"):
            # GFM finds bare URLs and e-mail addresses after escapes are resolved: a word joiner
            # before the scheme's colon, the ``@`` and the dot of ``www.`` breaks the match.
            out.append(_WORD_JOINER)
        elif ch in "-." and index and raw[index - 1] == ch:
            # Streamlit's markdown turns ``--`` into an en/em dash and ``...`` into an ellipsis
            # (smartypants, after escapes are resolved): a word joiner between them keeps them.
            out.append(_WORD_JOINER)
        if ch in _MARKDOWN_PUNCTUATION:
            out.append("\\" + ch)
        elif ch in _LINE_BREAKS:
            out.append(" ")
        elif UNSAFE.match(ch):
            out.append("\\" + _escaped(ch))
        else:
            out.append(ch)
    return "".join(out)


#: Column-name prefixes of percentiles: shown with one decimal (P95 is interpolated, so
#: 56,463.5 stays 56,463.5 in every table and tooltip, as in the CLI).
PERCENTILE_PREFIXES = ("p50_", "p95_")


def number_format(column: str) -> str | None:
    """The printf-style display format of a numeric table column, by its name and unit.

    Percentiles of tokens, turns, tool calls and seconds (``p50_*``, ``p95_*``) get one decimal
    (``%,.1f``); other ``*_tokens`` columns and counts are whole (``%,.0f``); ``*_s`` one decimal;
    ``*_usd`` columns are formatted as text elsewhere (``format_usd``), so None.
    """
    if column.endswith("_usd"):
        return None
    if column.startswith(PERCENTILE_PREFIXES) or column.endswith("_s"):
        return "%,.1f"
    if column.endswith(("_tokens", "_turns", "_tool_calls")) or column in (
        "turns",
        "tool_calls",
        "n",
        "n_cost",
        "runs",
    ):
        return "%,.0f"
    return None


#: Human labels of the analysis frames' columns (the CLI keeps the machine names).
COLUMN_LABELS = {
    "task_type": "Task type",
    "run_id": "Run ID",
    "service_name": "Service",
    "models": "Models",
    "model": "Model",
    "n": "Runs",
    "n_cost": "Priced runs",
    "runs": "Runs",
    "cost_usd": "Cost (USD)",
    "stop_reason": "Stop reason",
    "usage_status": "Usage",
    "quality": "Quality flags",
    "low_sample": "Sample",
    "finished_runs": "Finished runs",
    "budget_stops": "Budget stops",
    "limit_total_tokens": "Token limit",
    "ts_utc": "Time",
    "start_utc": "Start",
    "since_utc": "Since",
    "last_run_utc": "Last run",
    "tool_name": "Tool",
    "percent": "Used (%)",
    "key": "Limit",
    "current": "Current limit",
    "recommended": "Recommended",
    "change": "Change",
    "name": "Event",
    "turn": "Turn",
    "cache_read_share": "Cache reads (% of input)",
    "cache_write_share": "Cache writes (% of input)",
    "reasoning_share": "Reasoning (% of output)",
    "n_cache_read_tokens": "Runs with cache reads",
    "n_cache_write_tokens": "Runs with cache writes",
    "n_reasoning_tokens": "Runs with reasoning",
    "calls": "Calls",
    "timed_calls": "Timed calls",
}
_PREFIXES = (("p50_", "P50 "), ("p95_", "P95 "), ("max_", "Max "), ("limit_", "Limit "))


def column_label(column: str) -> str:
    """The human label of a table column: ``p50_total_tokens`` -> ``P50 total tokens``,
    ``max_cost_usd`` -> ``Max cost (USD)``, ``duration_s`` -> ``Duration (s)``,
    ``task_type`` -> ``Task type`` (``COLUMN_LABELS`` first)."""
    if column in COLUMN_LABELS:
        return COLUMN_LABELS[column]
    head, rest = "", column
    for prefix, text_ in _PREFIXES:
        if column.startswith(prefix):
            head, rest = text_, column[len(prefix) :]
            break
    unit = ""
    if rest.endswith("_usd"):
        rest, unit = rest[:-4], " (USD)"
    elif rest.endswith("_s"):
        rest, unit = rest[:-2], " (s)"
    words = rest.replace("_", " ")
    label = f"{head}{words}{unit}"
    return label[:1].upper() + label[1:]
