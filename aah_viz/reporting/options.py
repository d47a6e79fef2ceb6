"""The reporting flags ``aah-viz train`` and ``aah-viz retrofit`` share, checked before anything trains."""

from __future__ import annotations

import importlib.util

from aah_viz.errors import ConfigError
from aah_viz.torch_import import EXTRAS


def add_report_arguments(p) -> None:
    p.add_argument(
        "--report-to",
        default=None,
        metavar="TARGETS",
        help="also send the aah/ routing scalars (with train/loss, train/lr, eval/val_loss) to tensorboard "
        "(<out>/tensorboard), wandb and/or mlflow, comma-separated (each needs its extra; docs/reporting.md)",
    )
    p.add_argument(
        "--report-every", type=int, default=10, help="steps between reported scalars (default: 10, and the last)"
    )
    p.add_argument(
        "--report-images",
        type=int,
        default=0,
        metavar="N",
        help="send the layer x head window heatmap every N routing updates (default: 0, never)",
    )
    p.add_argument("--report-layers", action="store_true", help="also report each layer's mean window")


def check_installed(targets) -> None:
    """One line naming the extra for the first target whose package (named as the target) is missing."""
    for target in targets:
        if importlib.util.find_spec(target) is None:
            raise ConfigError(
                f"--report-to {target} needs the {target} package: pip install 'aah-viz[{EXTRAS[target]}]'"
            )


def report_settings(args):
    """The parsed flags as ``ReportSettings`` (None without --report-to), every named package present."""
    from aah_viz.reporting.reporter import ReportSettings
    from aah_viz.reporting.sinks import parse_targets

    targets = parse_targets(args.report_to)
    if not targets:
        return None
    check_installed(targets)
    return ReportSettings(targets, int(args.report_every), int(args.report_images), bool(args.report_layers))
