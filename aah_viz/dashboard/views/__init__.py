"""The dashboard's pages, one module per page; ``app.py`` wires them with ``st.navigation``.

The folder is not named ``pages``: Streamlit treats a ``pages/`` folder beside the main script as a
version-1 multipage app, and the first request of a fresh server to a page's address would run that
page's file alone, without the entry point's state and navigation.
"""
