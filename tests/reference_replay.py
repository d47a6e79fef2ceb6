"""Replay a reference training trajectory (``../shared/reference/conformance/trajectories``).

The reference's initial weights, batches, optimiser, schedule, per-step calls and evaluation
are reproduced exactly (see that folder's README); every forward's loss and, per layer, the
path, executed windows, hierarchy, head statistics and level features are recorded and compared
with ``==``. Used by ``tests/test_reference_trajectories.py``; needs torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from instrumentation.config import AAHConfig
from instrumentation.model import AAHTransformer

TRAJECTORIES = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference" / "conformance" / "trajectories"

# reference parameter-name pieces -> ours (trajectories/README.md)
RENAMES = (
    ("blocks.", "h."),
    (".ln1.", ".ln_1."),
    (".ln2.", ".ln_2."),
    (".attn.qkv.", ".attn.c_attn."),
    (".attn.proj.", ".attn.c_proj."),
    (".attn.controller.mlp.", ".attn.controller.net."),
    (".attn.joint_sibling_scorer.mlp.", ".attn.joint_scorer.net."),
    (".attn.pairwise_bias.mlp.", ".attn.sibling_bias.net."),
    (".mlp.fc1.", ".mlp.c_fc."),
    (".mlp.fc2.", ".mlp.c_proj."),
)

SHADOW_PATHS = ("warmup_or_disabled_control", "grouping_only_full_attention")
FIELDS = ("loss", "path", "windows", "levels", "head_stats", "level_features")


def trajectory_names() -> list[str]:
    return sorted(p.name[: -len(".json")] for p in TRAJECTORIES.glob("*.json"))


def _our_name(ref: str) -> str:
    for a, b in RENAMES:
        ref = ref.replace(a, b)
    return ref


def build_model(doc: dict, weights: Path, **overrides) -> AAHTransformer:
    cfg = AAHConfig.from_reference_dict(
        doc["reference_model_config"],
        vocab_size=doc["vocab_size"],
        block_size=doc["seq_len"],
        persist_routing_state=False,
        eval_mutates_routing=True,
        **overrides,
    )
    model = AAHTransformer(cfg)
    own = model.state_dict()
    loaded = {}
    with np.load(weights) as z:
        for name in z.files:
            ours = _our_name(name)
            assert ours in own, f"reference parameter {name} -> {ours} has no counterpart"
            loaded[ours] = torch.from_numpy(z[name].copy())
    missing = [k for k in own if k not in loaded and k != "lm_head.weight" and not k.endswith("_extra_state")]
    assert not missing, f"no reference weights for {missing}"
    model.load_state_dict(loaded, strict=False)
    return model


def _lr_lambda(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


@dataclass
class Replay:
    """What our model did at every forward, in the reference's format (one dict per layer)."""

    losses: list[float] = field(default_factory=list)
    layers: list[list[dict]] = field(default_factory=list)


def replay(name: str, max_steps: int | None = None, **overrides) -> tuple[dict, Replay]:
    """Run trajectory ``name`` (up to ``max_steps`` training steps); returns (reference doc, our replay)."""
    doc = json.loads((TRAJECTORIES / f"{name}.json").read_text())
    torch.manual_seed(777 + int(doc.get("seed", 0)))
    model = build_model(doc, TRAJECTORIES / f"{name}.weights.npz", **overrides)
    tr = doc["training"]
    total = int(tr["max_steps"])
    steps = total if max_steps is None else min(total, max_steps)
    opt = torch.optim.AdamW(
        model.parameters(), lr=tr["lr"], weight_decay=tr["weight_decay"], betas=tuple(tr["betas"]), eps=tr["eps"]
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_lambda(s, 10, total))
    control = model.cfg.apply_window_control
    out = Replay()
    last_tree: dict[int, list] = {}
    current: dict[int, dict] = {}

    def on_event(event) -> None:
        tree = event.tree
        if tree is None and event.path_mode in SHADOW_PATHS and model.cfg.build_hierarchy:
            # a rebuild skipped within a control interval would repeat the previous one exactly
            tree = last_tree.get(event.layer)
        if tree is not None and event.path_mode not in ("ungrouped_control_update",):
            last_tree[event.layer] = tree
        current[event.layer] = {
            "path": event.path_mode,
            "windows": event.window_idx.tolist(),
            "levels": None if tree is None else [[list(g) for g in lvl.groups] for lvl in tree],
            "level_features": None if tree is None else [lvl.features.tolist() for lvl in tree],
        }
        if event.path_mode == "ungrouped_control_update":
            current[event.layer]["levels"] = current[event.layer]["level_features"] = None

    def record(loss: torch.Tensor) -> None:
        out.losses.append(float(loss.detach()))
        rows = []
        for i, layer in enumerate(model.aah_layers()):
            row = dict(current[i])
            stats = layer.state.prev_stats
            row["head_stats"] = None if stats is None else stats.T.tolist()
            rows.append(row)
        out.layers.append(rows)

    eval_batches = [torch.tensor(b, dtype=torch.long) for b in doc["batches_token_ids"]["eval"]]
    with model.subscribe(on_event):
        for step in range(steps):
            batch = torch.tensor(doc["batches_token_ids"]["train"][step], dtype=torch.long)
            model.train()
            model.set_control(control)
            model.set_step(step)
            loss = model(batch[:, :-1], targets=batch[:, 1:]).loss
            record(loss)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            if (step + 1) % int(tr["eval_every"]) == 0:
                model.eval()
                with torch.no_grad():
                    for b in eval_batches:
                        record(model(b[:, :-1], targets=b[:, 1:]).loss)
    return doc, out


def compare(doc: dict, ours: Replay) -> dict[str, list[str]]:
    """Per field, the forwards (``kind step[/batch] layer``) where ours differs from the reference."""
    diffs: dict[str, list[str]] = {f: [] for f in FIELDS}
    for fwd, loss, layers in zip(doc["forwards"], ours.losses, ours.layers):
        where = f"{fwd['kind']} {fwd['step']}" + ("" if fwd["eval_batch"] is None else f"/{fwd['eval_batch']}")
        if loss != fwd["loss"]:
            diffs["loss"].append(where)
        for i, (ref, got) in enumerate(zip(fwd["layers"] or [], layers)):
            pairs = {
                "path": (ref["path"], got["path"]),
                "windows": (ref["executed_window_idx"], got["windows"]),
                "levels": (ref["levels"], got["levels"]),
                "head_stats": (ref["head_stats_entropy_norm_usage"], got["head_stats"]),
                "level_features": (ref.get("level_features"), got["level_features"]),
            }
            for key, (a, b) in pairs.items():
                if a != b:
                    diffs[key].append(f"{where} L{i}")
    return diffs
