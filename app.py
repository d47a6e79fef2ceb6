"""The routing dashboard from a checkout: ``streamlit run app.py [-- --logs DIR --reference DIR]``.

The entry point lives in the package (``aah_viz/dashboard/app.py``, what ``aah-viz dashboard`` runs).
"""

from aah_viz.dashboard.app import main

main()
