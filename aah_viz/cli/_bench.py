"""What every torch benchmark of ``aah-viz bench`` does before and after its body: the pair count checked,
a progress bar over the pairs, and the JSON printed with its warnings on stderr (the threads are
``aah_viz.torch_import.limit_threads``)."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from aah_viz.cli._json import json_text
from aah_viz.paired_timing import check_pairs


@contextmanager
def pairs_bar(name: str, pairs: int, extra: int = 1, unit: str = "pair"):
    """``(pairs, bar)``: the checked pair count and a bar over the pairs and ``extra`` warm-up rounds."""
    from tqdm import tqdm

    pairs = check_pairs(pairs)
    with tqdm(total=pairs + extra, desc=f"bench {name}", unit=unit, file=sys.stderr, disable=None) as bar:
        yield pairs, bar


def print_result(doc: dict, keep: tuple[str, ...] | None = None, indent: int | None = 2) -> None:
    """The JSON document (only ``keep``'s keys when given) on stdout, each of its warnings on stderr."""
    shown = doc if keep is None else {k: doc[k] for k in keep if k in doc}
    print(json_text(shown, indent=indent))
    for line in doc.get("warnings") or []:
        print(f"warning: {line}", file=sys.stderr)


def add_random_model_arguments(p, family: str) -> None:
    """``--model``, and the shape of the random ``family`` model built when it is not given."""
    p.add_argument(
        "--model",
        default=None,
        help=f"a Hugging Face model folder to time in its own shape (default: a random {family} built from one "
        "seed, shaped by the options below)",
    )
    p.add_argument("--layers", type=int, default=4, help=f"decoder layers of the random {family} (default 4)")
    p.add_argument("--heads", type=int, default=8, help=f"query heads of the random {family} (default 8)")
    p.add_argument(
        "--kv-heads", type=int, default=4, help=f"key/value heads of the random {family} (default 4: grouped-query)"
    )
    p.add_argument("--head-dim", type=int, default=64, help=f"head dimension of the random {family} (default 64)")


def add_device_arguments(p) -> None:
    """``--device``, ``--threads`` (1 by default: steadier timings on shared cores), ``--pairs``, ``--clock``."""
    from aah_viz.paired_timing import add_clock_argument, add_pairs_argument

    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1, steadier on shared cores; 0: torch's)"
    )
    add_pairs_argument(p)
    add_clock_argument(p)
