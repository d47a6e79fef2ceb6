"""``aah-viz bench routing``: one routing update per layer next to that layer's attention forward.

A routing update is everything the control path does at a control step (head features, feature
EMA, clustering, hierarchy, controller, selection); the attention forward is the layer's Q/K/V
projection, banded execution and output projection with the routing cached. Both are timed on the
``small`` preset shape for 8, 16, 32 and 64 heads, interleaved, and reported as medians.
"""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "routing",
        help="routing-update time per layer vs that layer's attention forward (JSON)",
        description="Time one AAH-v3 routing update of one layer (features, EMA, clustering, hierarchy, controller, "
        "selection) next to the same layer's attention forward at the small preset, for several head counts. "
        'Prints {"rows": [{"heads", "routing_update_ms", "attention_forward_ms", "ratio"}, ...]} '
        "with medians of interleaved repeats.",
    )
    parser.add_argument("--heads", default="8,16,32,64", help="comma-separated head counts (must divide n_embd=192)")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved timing repeats per head count")
    parser.add_argument("--batch", type=int, default=4, help="batch size of the attention input")
    parser.add_argument("--regime", default="full_adaptive", help="regime whose update path is timed")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps timings comparable)")
    parser.add_argument("--json", action="store_true", help="print JSON (the default output; kept for symmetry)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.errors import ConfigError
    from aah_viz.torch_import import require_torch

    torch = require_torch()
    torch.set_num_threads(max(1, args.threads))
    from instrumentation import bench_routing

    try:
        heads = [int(h) for h in str(args.heads).split(",") if h.strip()]
    except ValueError as err:
        raise ConfigError(f"--heads: expected comma-separated integers, got {args.heads!r}") from err
    result = bench_routing(heads, repeats=max(1, args.repeats), batch=max(1, args.batch), regime=args.regime)
    print(json.dumps(result, indent=2))
    return 0
