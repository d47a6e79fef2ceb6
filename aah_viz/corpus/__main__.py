"""``python -m aah_viz.corpus --out DIR [--docs N] [--seed S]``: write the synthetic probe set."""

from aah_viz.corpus.probe_set import main

if __name__ == "__main__":
    raise SystemExit(main())
