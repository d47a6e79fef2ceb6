"""The fast banded kernel on CPU: PyTorch's fused flash-attention CPU operator per region.

One head's rows split into regions that each map to one fused call:

* the causal prefix, rows [0, min(W, T)): every row sees all earlier keys (``is_causal``);
* the band, rows [W, T): query tiles of ``block`` rows, each with the key span it needs
  (block + W - 1 keys, an overlapping strided view, no copy), batched into one call with a shared additive
  tile mask. A first, shorter tile takes the rows that do not fill a whole block.

Each call covers many tiles, so a bucket costs a handful of large parallel operations. The
operator returns the row log-sum-exp, which gives the head statistics without the probability
matrix: -sum P ln P = lse - s . P (with s . P = scale * q . (P K), one more fused call with the
keys as values) and P[T-1, T-1] = exp(scale q_{T-1} . k_{T-1} - lse_{T-1}).
No attention dropout (the operator has none): the dispatcher uses the loop kernel for that.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tiles import Tile, tile_blocked_mask

_fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
CALL_BYTES = 8 << 20  # about what one operator call touches, so that it stays in cache


def supported(q: torch.Tensor, dropout_p: float) -> bool:
    return q.device.type == "cpu" and dropout_p == 0.0 and q.dtype in SUPPORTED_DTYPES


@dataclass(frozen=True)
class Region:
    """Rows [q0, q0 + rows * tiles); causal regions have one tile of all their rows and k0 = 0."""

    kind: str  # "causal" or "tiles"
    q0: int
    rows: int  # rows per tile
    tiles: int
    window: int

    @property
    def q1(self) -> int:
        return self.q0 + self.rows * self.tiles

    @property
    def k0(self) -> int:
        return 0 if self.kind == "causal" else self.q0 - self.window + 1

    @property
    def cols(self) -> int:  # keys per tile
        return self.rows + self.window - 1


def regions(seq_len: int, window: int, block: int) -> list[Region]:
    w = min(window, seq_len)
    out = [Region("causal", 0, w, 1, w)]
    band_rows = seq_len - w
    if band_rows <= 0:
        return out
    rest = band_rows % block
    if rest:
        out.append(Region("tiles", w, rest, 1, w))
    if band_rows >= block:
        out.append(Region("tiles", w + rest, block, band_rows // block, w))
    return out


def region_elements(seq_len: int, window: int, block: int) -> int:
    total = 0
    for reg in regions(seq_len, window, block):
        if reg.kind == "causal":
            total += reg.rows * (reg.rows + 1) // 2
        else:
            total += reg.tiles * reg.rows * reg.cols
    return total


_float_masks: dict = {}


def _tile_mask(reg: Region, dtype, device) -> torch.Tensor:
    """Additive (rows, cols) mask of a band tile: 0 inside the band, -inf outside (cached)."""
    key = (reg.rows, reg.window, dtype, str(device))
    mask = _float_masks.get(key)
    if mask is None:
        blocked = tile_blocked_mask(Tile(reg.q0, reg.q0 + reg.rows, reg.k0, reg.window), device)
        mask = torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill_(blocked, float("-inf"))
        if len(_float_masks) > 256:
            _float_masks.clear()
        _float_masks[key] = mask
    return mask


def _tiles(x: torch.Tensor, reg: Region, keys: bool) -> torch.Tensor:
    """A view (B * n, tiles, rows or cols, D) of a contiguous (B, n, T, D) tensor; key tiles overlap."""
    start, length = (reg.k0, reg.cols) if keys else (reg.q0, reg.rows)
    return _strided(x, start, reg.rows, reg.tiles, length)


def _strided(x: torch.Tensor, start: int, step: int, count: int, length: int) -> torch.Tensor:
    """A view (B * n, count, length, ...) of a contiguous (B, n, T, ...) tensor: rows start + i * step + [0, length)."""
    b, n, seq_len = x.shape[:3]
    row = x.stride(2)
    return x.as_strided(
        (b * n, count, length, *x.shape[3:]),
        (seq_len * row, step * row, row, *x.stride()[3:]),
        x.storage_offset() + start * row,
    )


def _pieces(rows: int, count: int, item_bytes: int):
    """Split (rows, count) items into calls of about ``CALL_BYTES``: (row slice, count slice) pairs.

    Tiles overlap, so the operator copies and writes gradients of several times the input size; in
    pieces that stay in cache this traffic costs far less than in one call over a whole bucket.
    """
    per_call = max(1, CALL_BYTES // max(1, item_bytes))
    if per_call < count:
        for r in range(rows):
            for c in range(0, count, per_call):
                yield slice(r, r + 1), slice(c, min(count, c + per_call))
        return
    step = max(1, per_call // count)
    for r in range(0, rows, step):
        yield slice(r, min(rows, r + step)), slice(0, count)


@dataclass
class FlashState:
    """What the backward needs: the bucket's inputs, its output and every row's log-sum-exp."""

    q: torch.Tensor  # (B, n, T, D), contiguous
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor  # (B, n, T, D), contiguous
    lse: torch.Tensor  # (B, n, T), float32
    window: int
    block: int
    scale: float


def flash_forward(q, k, v, window: int, block: int, scale: float, want_stats: bool, out):
    """q, k, v: contiguous (B, n, T, D) of one bucket; writes ``out``, the bucket's (B, n, T, D) view.

    Returns (state, stats, norm) with stats = (entropy_sum, usage) per (b, head) row, or None,
    and norm the per-(b, head) sum of output row norms (when stats are wanted).
    """
    b, n, seq_len, d = q.shape
    rows_out = torch.empty_like(q)
    rows_lse = torch.empty(b, n, seq_len, dtype=torch.float32, device=q.device)
    entropy = torch.zeros(b * n, dtype=torch.float32, device=q.device) if want_stats else None
    norm = torch.zeros(b * n, dtype=torch.float32, device=q.device) if want_stats else None
    for reg in regions(seq_len, window, block):
        if reg.kind == "causal":
            qr, kr, vr = (_strided(x, 0, reg.rows, 1, reg.rows) for x in (q, k, v))
            mask, causal = None, True
        else:
            qr, kr, vr = _tiles(q, reg, False), _tiles(k, reg, True), _tiles(v, reg, True)
            mask, causal = _tile_mask(reg, q.dtype, q.device), False
        o_all = _strided(rows_out, reg.q0, reg.rows, reg.tiles, reg.rows)
        lse_all = _strided(rows_lse, reg.q0, reg.rows, reg.tiles, reg.rows)
        item = (2 * reg.rows + 2 * reg.cols) * d * q.element_size()
        for hs, ts in _pieces(b * n, reg.tiles, item):
            qp, kp, vp = qr[hs, ts], kr[hs, ts], vr[hs, ts]
            o, lse = _fwd(qp, kp, vp, 0.0, causal, attn_mask=mask, scale=scale)
            o_all[hs, ts] = o
            lse_all[hs, ts] = lse
            if want_stats:
                pk, _ = _fwd(qp, kp, kp, 0.0, causal, attn_mask=mask, scale=scale)
                ent = lse.float() - scale * (qp.float() * pk.float()).sum(-1)
                entropy[hs] += ent.sum((-2, -1))
                norm[hs] += torch.linalg.vector_norm(o.float(), dim=-1).sum((-2, -1))
    out.copy_(rows_out)
    stats = None
    if want_stats:
        diag = scale * (q[:, :, -1].float() * k[:, :, -1].float()).sum(-1).reshape(-1)
        stats = (entropy, torch.exp(diag - rows_lse[:, :, -1].reshape(-1)))
    return FlashState(q, k, v, rows_out, rows_lse, min(window, seq_len), block, scale), stats, norm


def _key_block_mask(span: int, block: int, window: int, dtype, device) -> torch.Tensor:
    """Additive (span, block) mask of a key block against the queries that can see it: query row i, key
    column j (both from the block's first key) attend iff 0 <= i - j < W. The transpose of a band tile's mask."""
    key = ("keys", span, block, window, dtype, str(device))
    mask = _float_masks.get(key)
    if mask is None:
        rel = torch.arange(span, device=device).view(-1, 1) - torch.arange(block, device=device).view(1, -1)
        blocked = (rel < 0) | (rel >= window)
        mask = torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill_(blocked, float("-inf"))
        if len(_float_masks) > 256:
            _float_masks.clear()
        _float_masks[key] = mask
    return mask


def _key_blocks_backward(state: FlashState, grad_out, blocks: int, gq, gk, gv) -> None:
    """Gradients of keys [0, blocks * block) into the contiguous (B, n, T, D) buffers gq (added), gk, gv."""
    q, k, v, w, blk = state.q, state.k, state.v, state.window, state.block
    span = blk + w - 1
    mask = _key_block_mask(span, blk, w, q.dtype, q.device)
    qs, gs, os_, ls = (_strided(x, 0, blk, blocks, span) for x in (q, grad_out, state.out, state.lse))
    ks, vs, dks, dvs = (_strided(x, 0, blk, blocks, blk) for x in (k, v, gk, gv))
    dq_flat = gq.view(-1, *gq.shape[2:])
    item = (5 * span + 4 * blk) * q.shape[-1] * q.element_size()
    for hs, bs in _pieces(qs.shape[0], blocks, item):
        dq, dk, dv = _bwd(
            gs[hs, bs],
            qs[hs, bs],
            ks[hs, bs],
            vs[hs, bs],
            os_[hs, bs],
            ls[hs, bs],
            0.0,
            False,
            attn_mask=mask,
            scale=state.scale,
        )
        dks[hs, bs] = dk
        dvs[hs, bs] = dv
        rows = dq_flat[hs]
        for first in range(0, span, blk):  # query row first + i of block i is row bs.start * blk + first + i * blk
            length = min(blk, span - first)
            start = bs.start * blk + first
            view = rows.as_strided(
                (rows.shape[0], dq.shape[1], length, rows.shape[-1]),
                (rows.stride(0), blk * rows.stride(1), rows.stride(1), 1),
                rows.storage_offset() + start * rows.stride(1),
            )
            view += dq[:, :, first : first + length]


def flash_backward(state: FlashState, grad_out: torch.Tensor, dq, dk, dv) -> None:
    """grad_out: contiguous (B, n, T, D) of the bucket; dq, dk, dv: the bucket's (B, n, T, D)
    views of the gradient buffers. Writes dq and adds into dk and dv (zeroed by the caller).

    The gradient is taken per **key block** of ``block`` keys, each against the block + W - 1 queries
    that can see it (an overlapping strided view), with the forward's output and log-sum-exp of every
    row: the operator's backward of one block then gives that block's whole dK and dV (no overlap) and
    a share of dQ for its queries, added up across blocks. Keys from the last whole block on form one
    square tail against their own queries (causal when it is at most W long).
    """
    q, k, v, out, lse, w, scale = state.q, state.k, state.v, state.out, state.lse, state.window, state.scale
    seq_len = q.shape[2]
    gq, gk, gv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
    blocks = max(0, (seq_len - w + 1) // state.block) if w < seq_len else 0
    if blocks:
        _key_blocks_backward(state, grad_out, blocks, gq, gk, gv)
    tail = slice(blocks * state.block, seq_len)
    length = seq_len - tail.start
    causal = length <= w
    mask = None if causal else _key_block_mask(length, length, w, q.dtype, q.device)
    pieces = (x[:, :, tail] for x in (grad_out, q, k, v, out, lse))
    tq, tk, tv = _bwd(*pieces, 0.0, causal, attn_mask=mask, scale=scale)
    gq[:, :, tail] += tq
    gk[:, :, tail] = tk
    gv[:, :, tail] = tv
    dq.copy_(gq)
    dk += gk
    dv += gv
