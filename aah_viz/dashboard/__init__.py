"""The routing dashboard's pages (Streamlit). Pages arrange; analysis and figures compute.

One module per page; each exposes ``render()`` and renders itself when Streamlit runs it as a
page script. Shared state (logs root, selected runs, refresh token) lives in ``state``; cached
reads live in ``cache``.
"""
