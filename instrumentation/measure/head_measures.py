"""What the head similarities of ``aah_viz.analysis.head_similarity`` read, measured on two disjoint
halves of the data (``aah-viz head-similarity``).

- ``measure_decoder``: a causal model (a run's checkpoint, a retrofit run, a patched model folder)
  run with full causal attention on text blocks, as ``aah-viz profile`` runs it. Per head and half:
  the method's 9 features (mean |x| and std of q, k, v over the half's entries, and the mean entropy,
  output norm and last-key usage of its forwards, §4.1 and §11.2), the attention mass at every
  distance, and the share of it inside each candidate window. The features are what the warm-up's
  full-attention forwards give the method, without its EMA; the moments are summed in float64.
- ``measure_encoder_features``: the method's features of a BERT-family encoder's Q/K/V on each half
  of a list of texts (``probe_groups.qkv_head_features``).
- ``measure_probes``: the probes of ``aah-viz probe`` on all documents and on each half of them:
  every head's probe scores, and its attention-distance profile on the probe inputs.

The first half of the blocks (documents) is one half, the rest the other: disjoint text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from aah_viz.analysis.head_similarity import HeadInput
from aah_viz.errors import ConfigError
from aah_viz.probes.head_inputs import bucket_distance_mass, probe_inputs, span_from_mass
from instrumentation.backends.dense_masked import dense_masked_attention
from instrumentation.backends.stats import bucket_head_stats
from instrumentation.measure.profile import distance_mass


class _Half:
    """Sums over one half's forwards, per layer and head."""

    def __init__(self, n_layer: int, n_head: int, seq_len: int):
        self.moments = np.zeros((n_layer, 3, 3, n_head))  # (layer, q/k/v, sum |x| / sum x / sum x^2, head)
        self.entries = np.zeros(n_layer)  # entries per head summed (B * T * D per forward)
        self.stats = np.zeros((n_layer, n_head, 3))  # entropy, norm, usage summed over forwards
        self.mass = np.zeros((n_layer, n_head, seq_len))
        self.forwards = np.zeros(n_layer)

    def add(self, layer: int, qkv: Sequence[torch.Tensor], probs: torch.Tensor, out: torch.Tensor) -> None:
        for j, x in enumerate(qkv):
            x = x.detach().double()
            self.moments[layer, j, 0] += x.abs().sum(dim=(0, 2, 3)).cpu().numpy()
            self.moments[layer, j, 1] += x.sum(dim=(0, 2, 3)).cpu().numpy()
            self.moments[layer, j, 2] += (x * x).sum(dim=(0, 2, 3)).cpu().numpy()
        q = qkv[0]
        self.entries[layer] += q.shape[0] * q.shape[2] * q.shape[3]
        self.stats[layer] += torch.stack(bucket_head_stats(probs, out), dim=1).double().cpu().numpy()
        mass = distance_mass(probs).numpy()
        self.mass[layer, :, : mass.shape[1]] += mass
        self.forwards[layer] += 1

    def merged(self, other: _Half) -> _Half:
        both = _Half(*self.mass.shape)
        for name in ("moments", "entries", "stats", "mass", "forwards"):
            setattr(both, name, getattr(self, name) + getattr(other, name))
        return both

    def features(self) -> np.ndarray:
        """(n_layer, n_head, 9) the method's features of the half."""
        n = self.entries[:, None, None]
        abs_sum, total, squares = self.moments[:, :, 0], self.moments[:, :, 1], self.moments[:, :, 2]
        mean_abs = abs_sum / n
        var = (squares - total * total / n) / np.maximum(n - 1, 1)
        std = np.sqrt(np.clip(var, 0.0, None))
        moments = np.stack([mean_abs, std], axis=2).reshape(self.moments.shape[0], 6, -1)  # |q|, std q, |k|, ...
        stats = self.stats / np.maximum(self.forwards, 1)[:, None, None]
        return np.concatenate([moments.transpose(0, 2, 1), stats], axis=2)

    def distance(self) -> np.ndarray:
        """(n_layer, n_head, T) mean attention mass at each distance."""
        return self.mass / np.maximum(self.forwards, 1)[:, None, None]


def _capture(routed, halves: list[_Half], which: list[int]):
    """Full causal attention in every layer; each forward's sums go into ``halves[which[0]]``."""
    layers = routed.attention_layers()

    def make(layer):
        def attend(q, k, v, *, need_probs: bool = False, scale: float | None = None, mask=None):
            T = q.shape[2]  # the padding mask of a retrofitted model, if any, as its own attend takes it
            res = dense_masked_attention(q, k, v, [T] * q.shape[1], scale=scale, need_probs=True, mask=mask)
            halves[which[0]].add(layer.layer_index, (q, k, v), res.probs, res.out)
            return res.out, (res.probs if need_probs else None)

        return attend

    for layer in layers:
        layer.attend = make(layer)  # the instance attribute shadows the class's attend
    return layers


@torch.no_grad()
def measure_decoder(
    model,
    routed,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    *,
    logits_fn: Callable,
    candidate_windows: Sequence[int],
    progress: Callable[[int], None] | None = None,
) -> dict[str, HeadInput]:
    """The ``features``, ``distance`` and ``span`` inputs of a causal model on ``batches`` (the first
    half of them is one half of the data, the rest the other; at least two batches)."""
    if len(batches) < 2:
        raise ConfigError(f"two disjoint halves need at least 2 batches of text, got {len(batches)}")
    cfg = routed.cfg
    n_layer, n_head = len(routed.attention_layers()), int(cfg.n_head)
    seq_len = int(batches[0][0].shape[1])
    halves = [_Half(n_layer, n_head, seq_len), _Half(n_layer, n_head, seq_len)]
    which = [0]
    was = model.training
    model.eval()
    layers = _capture(routed, halves, which)
    try:
        for i, (x, _) in enumerate(batches):
            which[0] = 0 if i < len(batches) // 2 else 1
            logits_fn(model, x)
            if progress is not None:
                progress(1)
    finally:
        for layer in layers:
            layer.__dict__.pop("attend", None)
        model.train(was)
    parts = [halves[0], halves[1], halves[0].merged(halves[1])]
    n_blocks = sum(int(x.shape[0]) for x, _ in batches)
    where = f"{n_blocks} blocks of {seq_len} tokens, full attention"
    windows = [int(w) for w in candidate_windows]
    return {
        "features": _input([p.features() for p in parts], where),
        "distance": _input([bucket_distance_mass(p.distance()) for p in parts], where),
        "span": _input([span_from_mass(p.distance(), windows) for p in parts], where),
    }


def _input(parts: list[np.ndarray], source: str) -> HeadInput:
    a, b, both = parts
    return HeadInput(both, (a, b), source)


def halves_of(items: Sequence) -> tuple[list, list]:
    """The first half and the rest (disjoint)."""
    mid = len(items) // 2
    return list(items[:mid]), list(items[mid:])


def measure_encoder_features(model, tokenizer, texts: Sequence[str]) -> HeadInput:
    """The method's features of a BERT-family encoder on all ``texts`` and on each half of them."""
    from instrumentation.measure.probe_groups import qkv_head_features

    if len(texts) < 2:
        raise ConfigError(f"two disjoint halves need at least 2 texts, got {len(texts)}")
    a, b = halves_of(texts)
    parts = [qkv_head_features(model, tokenizer, part) for part in (a, b, list(texts))]
    return _input(parts, f"Q/K/V of {len(texts)} sentences")


def measure_probes(
    source,
    syntax_docs: Sequence,
    coref_docs: Sequence,
    *,
    step: int = 0,
    progress: Callable[[int], None] | None = None,
    **probe_kw,
) -> dict[str, HeadInput]:
    """The ``probe`` and ``distance`` inputs from the probes on all documents and on each half."""
    from aah_viz.probes.runner import run_probes

    if len(syntax_docs) + len(coref_docs) < 2:
        raise ConfigError("two disjoint halves need at least 2 probe documents")
    sa, sb = halves_of(syntax_docs)
    ca, cb = halves_of(coref_docs)
    parts = []
    for syn, cor in ((sa, ca), (sb, cb), (list(syntax_docs), list(coref_docs))):
        result = run_probes(source, syn, cor, step=step, **probe_kw)
        parts.append(probe_inputs(result.probe_heads, int(source.n_layer), int(source.n_head)))
        if progress is not None:
            progress(1)
    where = f"probes on {len(syntax_docs)} syntax and {len(coref_docs)} coreference documents"
    out = {}
    for kind in ("probe", "distance"):
        got = [p.get(kind) for p in parts]
        if all(g is not None for g in got):
            out[kind] = _input(_common_columns(got), where)
    return out


def _common_columns(parts: list[tuple[np.ndarray, list[str]]]) -> list[np.ndarray]:
    """The arrays restricted to the columns every part has (a rare relation may miss from a half)."""
    names = [set(cols) for _, cols in parts]
    keep = [c for c in parts[-1][1] if all(c in n for n in names)]
    return [arr[:, :, [cols.index(c) for c in keep]] for arr, cols in parts]


def blocks_as_batches(blocks: np.ndarray, batch_size: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from instrumentation.measure.inference import eval_batches

    return list(eval_batches(blocks, batch_size, device))


ENCODER_SENTENCES = 500  # sentences whose Q/K/V give an encoder's features (as scripts/make_minilm_sample.py)


def _run_validation_blocks(run_dir, seq_len: int) -> np.ndarray:
    """The validation blocks a run of ``aah-viz train`` held out (its manifest's data and split)."""
    from pathlib import Path

    from aah_viz.runlog import read_manifest
    from instrumentation.data import cut_blocks, load_token_stream

    data = read_manifest(Path(run_dir)).get("data") or {}
    source, val = data.get("source"), int(data.get("val_blocks") or 0)
    if not source or val < 1:
        raise ConfigError(f"{run_dir}: its manifest names no training data with held-out blocks; pass --data TEXT")
    tokens = load_token_stream(source, seed=int(data.get("data_seed") or 0), n_docs=int(data.get("n_docs") or 400))
    return cut_blocks(tokens, seq_len)[-val:]


def measure(
    run_dir,
    *,
    model_dir=None,
    data=None,
    blocks: int = 16,
    batch_size: int = 4,
    seq_len: int | None = None,
    syntax_docs: Sequence = (),
    coref_docs: Sequence = (),
    overrides: dict | None = None,
    regime: str = "full_adaptive",
    windows: Sequence[int] | None = None,
    device: str = "cpu",
    progress: bool = False,
    probe_kw: dict | None = None,
) -> tuple[dict[str, HeadInput], int]:
    """Every input the model gives on two halves of the data, and the step measured.

    The model is the run's newest checkpoint (or retrofit adapter), or ``model_dir``: a BERT-family
    encoder (features from the Q/K/V of the syntax sentences, attention by distance from the probe
    inputs) or a causal model folder, patched with ``regime``. A causal model is measured on ``data``
    (a text file) or, for a run of ``aah-viz train``, on its own validation blocks.
    """
    from pathlib import Path

    from instrumentation.data import cut_blocks

    bar = _bar(progress)
    out: dict[str, HeadInput] = {}
    probe_source, step = None, 0
    encoder = None
    if model_dir is not None:
        from instrumentation.measure.probe_extract import load_hf_model

        probe_source = load_hf_model(model_dir, device=device)
        encoder = probe_source.model if _is_encoder(probe_source.model) else None
    if encoder is not None:
        texts = [d.text[s.start : s.end] for d in syntax_docs for s in d.sentences][:ENCODER_SENTENCES]
        if not texts:
            raise ConfigError("an encoder's features come from the syntax sentences: pass --syntax FILE.conllu")
        out["features"] = measure_encoder_features(encoder, probe_source.tokenizer, texts)
    else:
        from instrumentation.measure.evaluation import load_for_evaluation
        from instrumentation.measure.inference import eval_batches
        from instrumentation.model import model_logits

        if windows is None and model_dir is not None and seq_len:
            from instrumentation.config import windows_for

            windows = windows_for(int(seq_len))  # spans over windows that blocks of seq_len tell apart
        loaded = load_for_evaluation(
            model_dir or run_dir, regime=regime, windows=windows, overrides=overrides, device=device
        )
        step = int(loaded.step or 0)
        T = int(seq_len or loaded.routed.cfg.block_size)
        if data is not None:
            cut = cut_blocks(loaded.tokens(Path(data)), T)
        elif loaded.kind == "run":
            cut = _run_validation_blocks(run_dir, T)
        else:
            raise ConfigError("a causal model folder or a retrofit run is measured on a text: pass --data TEXT")
        cut = cut[: max(2, int(blocks))]
        if cut.shape[0] < 2:
            raise ConfigError(f"the text gives {cut.shape[0]} blocks of {T + 1} tokens; two halves need at least 2")
        dev = next(loaded.model.parameters()).device
        batches = list(eval_batches(cut, max(1, min(batch_size, cut.shape[0] // 2)), dev))
        task = bar(len(batches), "measuring heads (full attention)")
        out.update(
            measure_decoder(
                loaded.model,
                loaded.routed,
                batches,
                logits_fn=model_logits,
                candidate_windows=loaded.routed.cfg.windows,
                progress=task.update,
            )  # fmt: skip
        )
        task.close()
        if (syntax_docs or coref_docs) and probe_source is None:
            probe_source = _probe_source(run_dir, loaded, device)
    if probe_source is not None and (syntax_docs or coref_docs):
        task = bar(3, "probing (two halves, then all)")
        found = measure_probes(
            probe_source, syntax_docs, coref_docs, step=step, progress=task.update, **(probe_kw or {})
        )
        task.close()
        out["probe"] = found["probe"] if "probe" in found else out.get("probe")
        if encoder is not None and "distance" in found:  # a causal model's distances come from full attention
            out["distance"] = found["distance"]
    return {k: v for k, v in out.items() if v is not None}, step


def _is_encoder(model) -> bool:
    from instrumentation.measure.probe_groups import encoder_attention_blocks

    try:
        encoder_attention_blocks(model)
    except ConfigError:
        return False
    return True


def _probe_source(run_dir, loaded, device):
    """The probes' attention source for a run's model, as ``aah-viz probe`` loads it."""
    from aah_viz.probes.target import resolve_target
    from instrumentation.measure.probe_extract import load_aah_checkpoint, load_retrofit_adapter

    target = resolve_target(str(run_dir), loaded.step)
    if target.kind == "aah":
        return load_aah_checkpoint(target.model_path, device)
    return load_retrofit_adapter(target.model_path, target.run_dir, device=device)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(progress: bool):
    def make(total: int, desc: str):
        if not progress:
            return _NoBar()
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit="step")

    return make
