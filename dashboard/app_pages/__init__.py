"""Dashboard pages, one file each, run by ``dashboard/streamlit_app.py`` (``st.navigation``)."""
