"""The first-paint benchmark's floor (``benchmarks/first_paint.py``): the smallest Streamlit app
that shows a number, one ``st.metric``. Served by ``streamlit run`` with the dashboard's own
options (``budgetlens.cli.dashboard_cmd.streamlit_command``), its first numbers are what
Streamlit's client start costs on this machine (HTML, JS bundle, websocket, one script run and
one element drawn) with nothing of budgetlens in them."""

import streamlit as st

st.metric("Runs", "3,704")
