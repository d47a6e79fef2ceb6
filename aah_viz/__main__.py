import sys

from aah_viz.cli import main

sys.exit(main())
