"""The frontier's measurements besides ``inference_pass``: the unpatched model's pass, the speed of a
configuration against it, and the profile under full attention that gives the static per-head windows."""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from aah_viz.paired_timing import interleave, paired_report, timed
from instrumentation.measure.frontier.plan import PROFILE_SHARE, Configuration, FrontierConfig, profiled_windows
from instrumentation.measure.frontier.record import FrontierRun
from instrumentation.measure.inference import eval_batches
from instrumentation.model import model_logits


def unpatched_pass(model, blocks: np.ndarray, device) -> dict:
    """Per-block NLL of the model as loaded: full causal attention, every pair covered."""
    losses, tokens = [], 0
    was = model.training
    model.eval()
    started = time.perf_counter()
    try:
        with torch.no_grad():
            for x, y in eval_batches(blocks, 1, device):
                logits = model_logits(model, x)
                nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="none")
                losses.append(nll.view(y.shape).sum(dim=1))
                tokens += int(y.numel())
        block_nll = torch.cat(losses).tolist()
    finally:
        model.train(was)
    loss = float(np.sum(block_nll)) / tokens
    T = int(blocks.shape[1] - 1)
    n_layer, n_head = int(model.config.num_hidden_layers), int(model.config.num_attention_heads)
    return dict(
        n_batches=int(blocks.shape[0]),
        tokens=tokens,
        seq_len=T,
        val_loss=loss,
        val_ppl=float(np.exp(loss)),
        elapsed_s=time.perf_counter() - started,
        acr=1.0,
        acr_causal=1.0,
        realised_work=None,  # what the model's own kernel computes is not measured
        windows=[[T] * n_head for _ in range(n_layer)],
        block_nll=block_nll,
    )


def speed_vs_unpatched(base, work, block: np.ndarray, device, pairs: int) -> dict:
    """Tokens/s of ``work`` over the unpatched ``base`` on one block: median of paired ratios (CPU clock)."""
    x = torch.from_numpy(block[None, :-1]).to(device)

    def forward(model):
        with torch.no_grad():
            model_logits(model, x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    clock = "wall" if device.type == "cuda" else "cpu"
    raw = interleave({"speed": (timed(lambda: forward(base)), timed(lambda: forward(work)))}, pairs=pairs)
    doc = paired_report(raw, sides={"speed": ("unpatched", "configuration")}, clock=clock)
    return {**doc["ratios"]["speed"], "clock": clock}


def profile_head_windows(work, blocks: np.ndarray, fc: FrontierConfig, run: FrontierRun, device) -> dict:
    """Profile ``work`` under full attention on adaptation blocks (written to the run once, with the
    needed windows of every head at each share, without and with each number of sink tokens)."""
    from instrumentation.measure.profile import profile_heads
    from instrumentation.retrofit import patch_model

    handle = patch_model(work, "full_attention", fc.candidate_windows(), block_size=fc.seq_len)
    try:
        rows, detail = profile_heads(
            work,
            handle,
            eval_batches(blocks, 1, device),
            logits_fn=model_logits,
            step=0,
            sink_tokens=fc.sink_tokens,
        )
    finally:
        handle.unpatch()
    if "needed_95" not in detail:  # without sink tokens the detail holds no per-head arrays: from the rows
        cols = {k: np.asarray(v) for k, v in rows.items()}
        one = cols["window"] == cols["window"].min()  # one row per (layer, head), in layer-then-head order
        detail["needed_95"] = cols["needed_95"][one].reshape(int(work.config.num_hidden_layers), -1).tolist()
    assignment = profiled_windows(detail, fc.candidate_windows(), Configuration("", "head_windows"))
    event = {
        **detail,
        "data": "adaptation text",
        "profile_share": PROFILE_SHARE,
        "configuration": "profile",
        "head_windows": assignment,
    }
    if "profile" not in run.done:
        run.write("profile", event, tables={"head_spans": rows})
    elif fc.sink_tokens:  # a continuation that adds sink tokens: their needed windows, the same head_spans rows
        run.write("profile", event)
    return detail
