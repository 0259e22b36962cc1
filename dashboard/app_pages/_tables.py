"""The dashboard's tables: the one display rule of a frame (labels, USD, rates, times, run
links) and ``st.dataframe`` with it; the link of a run id (URL-encoded)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

import pandas as pd
import streamlit as st

from budgetlens.analysis.values import is_rate_column
from budgetlens.analysis.views import LOW_SAMPLE_RUNS
from budgetlens.dashboard.app_pages import _paint
from budgetlens.dashboard.formatting import (
    MISSING,
    column_label,
    format_usd,
    is_missing,
    number_format,
    visible_text,
)

#: The link of a run id: the Runs page with ``?run=<id>`` (relative, so it works under any
#: base path); the table shows the id itself (``RUN_LINK_TEXT`` captures it from the link).
RUN_LINK_PREFIX = "runs?run="
RUN_LINK_TEXT = r"runs\?run=(.*)$"
#: Characters of a run id kept as they are in the link (the link text shows the id unchanged).
_RUN_ID_SAFE = "-_.~:@!$'()*+,;/"


def run_link(run_id: str, *, from_root: bool = False) -> str:
    """The URL that opens ``run_id`` on the Runs page, the id URL-encoded: relative
    (``runs?run=<id>``), or from the app's root (``/runs?run=<id>``) with ``from_root``.
    ``RUN_LINK_TEXT`` captures the id back from either."""
    return ("/" if from_root else "") + RUN_LINK_PREFIX + urllib.parse.quote(run_id, safe=_RUN_ID_SAFE)


#: The widest a pinned run-id column gets (pixels); a longer id is cut, its cell shows it all.
RUN_ID_MAX_PX = 300
#: Text of the ``low_sample`` column (a badge, never a checkbox that looks editable).
LOW_SAMPLE_BADGE = "low sample"


def _whole(series: pd.Series) -> bool:
    values = pd.to_numeric(series, errors="coerce").dropna()
    return bool(((values - values.round()).abs() < 1e-9).all())


#: A run's missing cost when its usage is unknown (a call reported none): not "unpriced", which
#: names a model with no known price.
UNKNOWN_USAGE = "unknown usage"


def _unknown_usage(frame: pd.DataFrame) -> list[bool]:
    """Per row: the run's usage is unknown (``usage_status`` 'unknown'), so a missing cost is not
    a price problem."""
    if "usage_status" not in frame:
        return [False] * len(frame)
    return [str(v) == "unknown" for v in frame["usage_status"]]


def display_frame(
    frame: pd.DataFrame, *, unpriced: str = "unpriced", tz: str | None = None
) -> tuple[pd.DataFrame, dict]:
    """(frame, column_config) for ``st.dataframe`` with the dashboard's one display rule.

    Every column gets its human label (``formatting.column_label``). USD columns (``*_usd``)
    become text in the CLI's USD format (``format_usd``: ``$0.0039``, never ``$0.00`` for a
    non-zero value; ``unpriced`` for a missing one, ``unknown usage`` for a run's missing
    ``cost_usd`` whose ``usage_status`` is unknown); ``quality`` flags read empty when none; rates and shares (``*_rate``, ``*_share``,
    ``*_rate_upper``, 0..1) read ``20.1 %``;
    ``low_sample`` reads ``low sample`` or nothing; percentiles keep one decimal unless the whole
    column is whole; counts and tokens have thousands separators; ``*_utc`` timestamps are shown
    in ``tz`` (label ``Start (tz)``); ``run_id`` is pinned, as wide as its ids (at most
    RUN_ID_MAX_PX). Pure apart
    from building Streamlit column configs.
    """
    shown = frame.copy()
    config: dict = {}
    for column in shown.columns:
        name = str(column)
        label = column_label(name)
        series = shown[column]
        numeric = pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
        if name.endswith("_usd"):
            unknown = _unknown_usage(frame) if name == "cost_usd" else [False] * len(series)
            shown[column] = [
                UNKNOWN_USAGE if is_missing(v) and why else format_usd(v, unpriced=unpriced)
                for v, why in zip(series, unknown)
            ]
            config[column] = st.column_config.TextColumn(label, alignment="right")
        elif name == "quality":
            shown[column] = ["" if is_missing(v) or v == "" else str(v) for v in series]
            config[column] = st.column_config.TextColumn(label, help="Data-quality flags; empty = none")
        elif name == "low_sample":
            shown[column] = [LOW_SAMPLE_BADGE if not is_missing(v) and bool(v) else "" for v in series]
            config[column] = st.column_config.TextColumn(
                label, help=f"low sample = fewer than {LOW_SAMPLE_RUNS} runs: a rough guide"
            )
        elif is_rate_column(name) and numeric:
            shown[column] = series * 100
            config[column] = st.column_config.NumberColumn(label, format="%.1f %%")
        elif name == "percent" and numeric:
            config[column] = st.column_config.NumberColumn(label, format="%.1f %%")
        elif name.endswith("_utc"):
            if tz and not shown.empty:
                values = pd.to_datetime(series)
                shown[column] = values.dt.tz_localize("UTC").dt.tz_convert(tz).dt.tz_localize(None)
            config[column] = st.column_config.DatetimeColumn(
                f"{label} ({tz or 'UTC'})", format="YYYY-MM-DD HH:mm:ss"
            )
        elif name == "run_id":
            longest = max((len(str(v)) for v in series if not is_missing(v)), default=8)
            shown[column] = [None if is_missing(v) else run_link(str(v)) for v in series]
            config[column] = st.column_config.LinkColumn(  # wide enough for the whole id
                label,
                width=int(min(RUN_ID_MAX_PX, 7.2 * longest + 26)),
                pinned=True,
                display_text=RUN_LINK_TEXT,
                help="The run's id: click to open the run",
            )
        elif numeric and number_format(name):
            fmt = number_format(name)
            if fmt == "%,.1f" and _whole(series):
                fmt = "%,.0f"
            config[column] = st.column_config.NumberColumn(label, format=fmt)
        elif numeric and pd.api.types.is_integer_dtype(series):
            config[column] = st.column_config.NumberColumn(label, format="%,d")
        else:
            if series.dtype.kind == "O":  # stored text: no control character or bidi override
                shown[column] = series.map(visible_text)
            config[column] = label
    return shown, config


def _pinned(column, label: str):
    """``column`` (a Streamlit column config, a plain label or None) pinned to the left."""
    if isinstance(column, dict):
        return {**column, "pinned": True}
    return st.column_config.Column(column if isinstance(column, str) else label, pinned=True)


def table(
    frame: pd.DataFrame,
    column_config: dict | None = None,
    *,
    first: Sequence[str] = (),
    unpriced: str = "unpriced",
    tz: str | None = None,
    **kwargs,
):
    """``st.dataframe`` (returned: its selection state with ``on_select``) without the index, missing values as an em dash (never ``None``),
    columns labelled and formatted by ``display_frame``; ``first`` names the columns shown
    first (the most important ones), the others follow in their order; ``column_config``
    overrides per column.

    The layout rule at any width (1280 px included): a table wider than its frame scrolls inside
    the frame, never the page; its key columns (``first``) come first and the first of them is
    pinned, so it stays in view while the rest scroll past."""
    if _paint.hold_table(len(frame), kwargs.get("height")):
        return None  # a page's first run: a frame of its height, the table a run later
    shown, config = display_frame(frame, unpriced=unpriced, tz=tz)
    config.update(column_config or {})
    order = [c for c in first if c in shown.columns]
    order += [c for c in shown.columns if c not in order]
    if order:
        config[order[0]] = _pinned(config.get(order[0]), column_label(str(order[0])))
    return st.dataframe(
        shown, hide_index=True, column_config=config, column_order=order, placeholder=MISSING, **kwargs
    )
