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
    b, n, seq_len, d = x.shape
    start, length = (reg.k0, reg.cols) if keys else (reg.q0, reg.rows)
    return x.as_strided(
        (b * n, reg.tiles, length, d), (seq_len * d, reg.rows * d, d, 1), x.storage_offset() + start * d
    )


@dataclass
class FlashState:
    regions: list
    saved: list  # per region: (q, k, v, out, lse, mask)
    scale: float
    shape: tuple


def flash_forward(q, k, v, window: int, block: int, scale: float, want_stats: bool, out):
    """q, k, v: contiguous (B, n, T, D) of one bucket; writes ``out``, the bucket's (B, n, T, D) view.

    Returns (state, stats, norm) with stats = (entropy_sum, usage) per (b, head) row, or None,
    and norm the per-(b, head) sum of output row norms (when stats are wanted).
    """
    b, n, seq_len, d = q.shape
    regs = regions(seq_len, window, block)
    saved = []
    entropy = torch.zeros(b * n, dtype=torch.float32, device=q.device) if want_stats else None
    norm = torch.zeros(b * n, dtype=torch.float32, device=q.device) if want_stats else None
    for reg in regs:
        if reg.kind == "causal":
            qr, kr, vr = (x[:, :, : reg.q1] for x in (q, k, v))
            mask, causal = None, True
        else:
            qr, kr, vr = _tiles(q, reg, False), _tiles(k, reg, True), _tiles(v, reg, True)
            mask, causal = _tile_mask(reg, q.dtype, q.device), False
        o, lse = _fwd(qr, kr, vr, 0.0, causal, attn_mask=mask, scale=scale)
        saved.append((qr, kr, vr, o, lse, mask))
        rows = o.reshape(b, n, reg.q1 - reg.q0, d)
        out[:, :, reg.q0 : reg.q1] = rows
        if want_stats:
            pk, _ = _fwd(qr, kr, kr, 0.0, causal, attn_mask=mask, scale=scale)
            ent = lse.float() - scale * (qr.float() * pk.float()).sum(-1)
            entropy += ent.reshape(b * n, -1).sum(-1)
            norm += torch.linalg.vector_norm(rows.float(), dim=-1).reshape(b * n, -1).sum(-1)
    stats = None
    if want_stats:
        last_lse = saved[-1][4].reshape(b * n, -1)[:, -1].float()
        diag = scale * (q[:, :, -1].float() * k[:, :, -1].float()).sum(-1).reshape(-1)
        stats = (entropy, torch.exp(diag - last_lse))
    return FlashState(regs, saved, scale, tuple(q.shape)), stats, norm


def _overlap_add_(dst: torch.Tensor, tiles_grad: torch.Tensor, reg: Region) -> None:
    """dst[:, :, key] += sum over tiles of the tile gradient at that key (the adjoint of the key tiles).

    ``dst``: a (B, n, T, D) view with unit stride in D; ``tiles_grad``: (B * n, tiles, cols, D).
    Tile i column j is key k0 + i * rows + j; column chunks of ``rows`` map to strided views of dst.
    """
    b, n, _, d = dst.shape
    s_b, s_h, s_t, _ = dst.stride()
    grad = tiles_grad.reshape(b, n, reg.tiles, reg.cols, d)
    for start in range(0, reg.cols, reg.rows):
        length = min(reg.rows, reg.cols - start)
        view = dst.as_strided(
            (b, n, reg.tiles, length, d),
            (s_b, s_h, reg.rows * s_t, s_t, 1),
            dst.storage_offset() + (reg.k0 + start) * s_t,
        )
        view += grad[:, :, :, start : start + length]


def flash_backward(state: FlashState, grad_out: torch.Tensor, dq, dk, dv) -> None:
    """grad_out: contiguous (B, n, T, D) of the bucket; dq, dk, dv: the bucket's (B, n, T, D)
    views of the gradient buffers. Writes dq and adds into dk and dv (zeroed by the caller)."""
    b, n, seq_len, d = state.shape
    for reg, (qr, kr, vr, out, lse, mask) in zip(state.regions, state.saved):
        rows = slice(reg.q0, reg.q1)
        if reg.kind == "causal":
            g = grad_out[:, :, rows]
            gq, gk, gv = _bwd(g, qr, kr, vr, out, lse, 0.0, True, attn_mask=None, scale=state.scale)
            dq[:, :, rows] = gq
            dk[:, :, rows] += gk
            dv[:, :, rows] += gv
            continue
        g = _tiles(grad_out, reg, False)
        gq, gk, gv = _bwd(g, qr, kr, vr, out, lse, 0.0, False, attn_mask=mask, scale=state.scale)
        if dq.is_contiguous():
            _tiles(dq, reg, False).copy_(gq)
        else:
            dq[:, :, rows] = gq.reshape(b, n, reg.q1 - reg.q0, d)
        _overlap_add_(dk, gk, reg)
        _overlap_add_(dv, gv, reg)
