"""What ``feature_token_stride`` changes: strided against exact routing features on a trained model.

Trains an AAH model (``full_adaptive``, banded attention) on the synthetic corpus for ``--steps``
steps, then routes one held-out batch through every layer twice per stride: exact (every token)
and with ``feature_token_stride=s``, from the same routing state. Reports per stride:

- ``moment_rel_dev``: median and max over layers, heads and the six Q/K/V moments of
  |strided - exact| / |exact|;
- ``level0_identical``: layers whose level-0 head groups are the same partition;
- ``level0_ari``: mean adjusted Rand index of the level-0 partitions against the exact ones.

The baseline row ``another_batch`` compares the exact features of a second held-out batch with the
first: how much the features move from batch to batch anyway.

    python scripts/feature_stride_accuracy.py --seq-len 1024 --heads 16 --steps 60 --strides 2,4,8
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from aah_viz.analysis.partitions import ari_rows  # noqa: E402
from aah_viz.torch_import import limit_threads  # noqa: E402
from instrumentation import AAHConfig, AAHTransformer  # noqa: E402
from instrumentation.attention import split_heads  # noqa: E402
from instrumentation.config import windows_for  # noqa: E402
from instrumentation.data import load_token_stream, split_blocks, training_batch  # noqa: E402
from instrumentation.routing.clustering import labels_from_groups  # noqa: E402
from instrumentation.routing.features import head_features  # noqa: E402
from instrumentation.routing.step import RoutingInputs, route_step  # noqa: E402


def train(cfg: AAHConfig, steps: int, batch: int, seed: int):
    torch.manual_seed(seed)
    model = AAHTransformer(cfg)
    splits = split_blocks(load_token_stream(seed=seed), cfg.block_size)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in tqdm(range(steps), desc="training", file=sys.stderr):
        model.prepare_step(step)
        x, y = training_batch(splits, step, batch, seed=seed)
        loss = model(x, targets=y).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, splits


def layer_qkv(model: AAHTransformer, tokens: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    """Per AAH layer, the (B, H, T, D) Q/K/V of one evaluation forward."""
    layers = model.aah_layers()
    inputs = []
    hooks = [layer.c_attn.register_forward_pre_hook(lambda mod, args: inputs.append(args[0])) for layer in layers]
    model.eval()
    with torch.no_grad():
        model(tokens)
        for h in hooks:
            h.remove()
        return [tuple(split_heads(x, layer.c_attn, model.cfg.n_head)) for layer, x in zip(layers, inputs)]


def moments(q, k, v) -> torch.Tensor:
    return head_features(q, k, v)[:, :6]


def level0_labels(layer, qkv, cfg: AAHConfig) -> np.ndarray:
    """Level-0 head labels of one routing update from the layer's routing state."""
    with torch.no_grad():
        _, decision = route_step(layer.state, RoutingInputs(*qkv, step=None, want_tree=True), cfg, layer.networks)
    return np.asarray(labels_from_groups(decision.tree[0].groups, cfg.n_head))


def canonical(labels) -> list[int]:
    """Labels renamed in order of first appearance: equal lists are the same partition."""
    names: dict[int, int] = {}
    return [names.setdefault(int(x), len(names)) for x in labels]


def compare(exact_m, other_m, exact_labels, other_labels) -> dict:
    dev = torch.cat([((o - e).abs() / e.abs()).flatten() for e, o in zip(exact_m, other_m)])
    ari = ari_rows(np.stack(exact_labels), np.stack(other_labels))
    same = sum(canonical(a) == canonical(b) for a, b in zip(exact_labels, other_labels))
    return {
        "moment_rel_dev": {"median": float(f"{dev.median():.3g}"), "max": float(f"{dev.max():.3g}")},
        "level0_identical": f"{same}/{len(exact_labels)}",
        "level0_ari": round(float(np.mean(ari)), 4),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Prints one JSON document.")
    p.add_argument("--preset", default="small", help="size preset (default small)")
    p.add_argument("--seq-len", type=int, default=1024, help="sequence length T; windows T/8, T/4, T/2, T")
    p.add_argument("--heads", type=int, default=16, help="attention heads")
    p.add_argument("--steps", type=int, default=60, help="training steps before the comparison")
    p.add_argument("--batch", type=int, default=4, help="batch size of training and of the compared batches")
    p.add_argument("--strides", default="2,4,8", help="comma-separated strides to compare with every token")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = p.parse_args(argv)
    limit_threads(max(1, args.threads))
    strides = [int(s) for s in args.strides.split(",") if s.strip()]
    T = args.seq_len
    cfg = AAHConfig.from_preset(
        args.preset,
        n_head=args.heads,
        block_size=T,
        windows=windows_for(T),
        attention_backend="banded",
        warmup_steps=min(10, args.steps),
    )
    model, splits = train(cfg, args.steps, args.batch, args.seed)
    held_out = torch.from_numpy(splits.val[: 2 * args.batch, :-1])
    if held_out.shape[0] < 2 * args.batch:
        raise SystemExit(f"need {2 * args.batch} held-out blocks, the corpus has {held_out.shape[0]}")
    layers = model.aah_layers()
    first, second = layer_qkv(model, held_out[: args.batch]), layer_qkv(model, held_out[args.batch :])
    exact_m = [moments(*qkv) for qkv in first]
    exact_labels = [level0_labels(layer, qkv, cfg) for layer, qkv in zip(layers, first)]
    out = {
        "preset": args.preset,
        "seq_len": T,
        "heads": args.heads,
        "steps": args.steps,
        "batch": args.batch,
        "another_batch": compare(
            exact_m,
            [moments(*qkv) for qkv in second],
            exact_labels,
            [level0_labels(layer, qkv, cfg) for layer, qkv in zip(layers, second)],
        ),
        "strides": {},
    }
    for s in strides:
        kept = [tuple(x[:, :, ::s] for x in qkv) for qkv in first]
        strided_cfg = dataclasses.replace(cfg, feature_token_stride=s)
        out["strides"][str(s)] = compare(
            exact_m,
            [moments(*qkv) for qkv in kept],
            exact_labels,
            [level0_labels(layer, qkv, strided_cfg) for layer, qkv in zip(layers, first)],
        )
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
