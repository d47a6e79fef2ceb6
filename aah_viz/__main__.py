import sys

from aah_viz.cli import main

if __name__ == "__main__":
    sys.exit(main())
