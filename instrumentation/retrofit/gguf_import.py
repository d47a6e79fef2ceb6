"""A GGUF model (llama.cpp's single-file format) as an ordinary Hugging Face model folder.

``transformers`` reads GGUF files (dequantising every tensor to float32), but a model loaded that way
refuses ``save_pretrained``. ``import_gguf`` loads it, rebuilds the same architecture from its
config without the quantisation entry, copies the weights in (every key must match), and saves that
with the file's tokenizer. The folder is written beside ``out_dir`` under a hidden name and renamed
into place only when complete, so a failure leaves nothing half-written. ``gguf_source.json`` in the
folder records where the weights came from (file, SHA-256, architecture, tensor types): weights
dequantised from 4 bits are not the published float model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from aah_viz.errors import ConfigError, InputFormatError, MissingDependencyError

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
SOURCE_FILE = "gguf_source.json"
GGUF_HINT = "reading GGUF files needs the gguf package: pip install 'aah-viz[gguf]'"


@dataclass(frozen=True)
class GGUFSummary:
    """What a GGUF file's header says about the model inside."""

    architecture: str
    name: str | None
    tensor_types: dict[str, int]  # ggml type name -> number of tensors
    n_tensors: int


def _require_gguf():
    try:
        import gguf
    except ImportError as err:
        raise MissingDependencyError(GGUF_HINT) from err
    return gguf


def _field(reader, key: str):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def read_summary(path: str | Path) -> GGUFSummary:
    """The architecture and tensor types from the file's header; one clear error for a damaged file."""
    gguf = _require_gguf()
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"{path} is not a file; give a .gguf model file")
    try:
        reader = gguf.GGUFReader(str(path))
        architecture = _field(reader, "general.architecture")
        types = Counter(t.tensor_type.name for t in reader.tensors)
        n_tensors = len(reader.tensors)
        name = _field(reader, "general.name")
    except Exception as err:  # noqa: BLE001 - any parse failure is a damaged file, said in one line
        raise InputFormatError(f"{path}: not a readable GGUF file ({type(err).__name__}: {err})") from None
    if not isinstance(architecture, str):
        raise InputFormatError(f"{path}: the GGUF header names no general.architecture")
    if architecture in SUPPORTED_ARCHITECTURES:
        check_layout(reader, architecture, path)
    return GGUFSummary(architecture, name if isinstance(name, str) else None, dict(types), n_tensors)


# tensors every block of these architectures holds (llama.cpp's names) and what each one's shape is, in
# ggml order (first dimension first): E embedding, F feed-forward, Q query width, K key/value width, D head
BLOCK_TENSORS = {
    "attn_norm.weight": ("E",),
    "attn_q.weight": ("E", "Q"),
    "attn_k.weight": ("E", "K"),
    "attn_v.weight": ("E", "K"),
    "attn_output.weight": ("Q", "E"),
    "ffn_norm.weight": ("E",),
    "ffn_gate.weight": ("E", "F"),
    "ffn_up.weight": ("E", "F"),
    "ffn_down.weight": ("F", "E"),
}
EXTRA_BLOCK_TENSORS = {
    "qwen2": {"attn_q.bias": ("Q",), "attn_k.bias": ("K",), "attn_v.bias": ("K",)},
    "qwen3": {"attn_q_norm.weight": ("D",), "attn_k_norm.weight": ("D",)},
}
TOP_TENSORS = {"token_embd.weight": ("E", "V"), "output_norm.weight": ("E",)}
# present in some files and not needed: the head tied to the embedding when absent; llama.cpp's rope
# frequencies, which the header's rope settings already give
OPTIONAL_TENSORS = {"output.weight": ("E", "V"), "rope_freqs.weight": None}
MAX_BLOCKS = 4096  # a bound on any header before a model is built from it


def _positive_int(reader, key: str, path: Path, *, default: int | None = None) -> int:
    value = _field(reader, key)
    if value is None and default is not None:
        return default
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputFormatError(f"{path}: the GGUF header's {key} is {value!r}; it must be a positive whole number")
    return value


def check_layout(reader, arch: str, path: Path) -> None:
    """Every tensor the architecture needs is in the file with the shape the header implies, every
    tensor in the file is one it uses, and the declared sizes are the tensors' own: refused in one
    line before anything is allocated (a header saying more blocks than the file holds, ids beyond the
    vocabulary)."""
    blocks = _positive_int(reader, f"{arch}.block_count", path)
    n_embd = _positive_int(reader, f"{arch}.embedding_length", path)
    n_head = _positive_int(reader, f"{arch}.attention.head_count", path)
    n_kv = _positive_int(reader, f"{arch}.attention.head_count_kv", path, default=n_head)
    n_ff = _positive_int(reader, f"{arch}.feed_forward_length", path)
    head_dim = _positive_int(reader, f"{arch}.attention.key_length", path, default=max(1, n_embd // n_head))
    if blocks > MAX_BLOCKS:
        raise InputFormatError(f"{path}: the GGUF header's {arch}.block_count {blocks} is above {MAX_BLOCKS}")
    if n_head % n_kv:
        raise InputFormatError(f"{path}: {n_head} attention heads do not share {n_kv} key/value heads evenly")
    if f"{arch}.attention.key_length" not in reader.fields and n_embd % n_head:
        raise InputFormatError(f"{path}: embedding length {n_embd} is not a multiple of {n_head} heads")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    shapes = {t.name: [int(d) for d in t.shape] for t in reader.tensors}
    embd = shapes.get("token_embd.weight")
    n_vocab = embd[1] if embd and len(embd) == 2 else (len(tokens) if isinstance(tokens, list) else 0)
    if not n_vocab:
        raise InputFormatError(f"{path}: the GGUF file holds no vocabulary (tokenizer.ggml.tokens)")
    for key in ("bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id"):
        token = _field(reader, f"tokenizer.ggml.{key}")
        if token is not None and not (isinstance(token, int) and 0 <= token < n_vocab):
            raise InputFormatError(f"{path}: tokenizer.ggml.{key} {token!r} is not an id of its {n_vocab} tokens")
    sizes = dict(E=n_embd, F=n_ff, Q=n_head * head_dim, K=n_kv * head_dim, D=head_dim, V=n_vocab)
    wanted = dict(TOP_TENSORS)
    per_block = {**BLOCK_TENSORS, **EXTRA_BLOCK_TENSORS.get(arch, {})}
    for i in range(blocks):
        wanted.update({f"blk.{i}.{suffix}": shape for suffix, shape in per_block.items()})
    missing = [name for name in wanted if name not in shapes]
    if missing:
        raise InputFormatError(
            f"{path}: tensor {missing[0]} is missing ({len(missing)} missing in all; the header says "
            f"{blocks} blocks); the file is incomplete or its header wrong"
        )
    extra = [name for name in shapes if name not in wanted and name not in OPTIONAL_TENSORS]
    if extra:
        raise InputFormatError(
            f"{path}: tensor {extra[0]} is not one a {arch} model of {blocks} blocks uses ({len(extra)} such); "
            "the header and the tensors disagree"
        )
    for name, dims in {**wanted, **OPTIONAL_TENSORS}.items():
        if dims is None or name not in shapes:
            continue
        want = [sizes[d] for d in dims]
        if shapes[name] != want:
            raise InputFormatError(f"{path}: tensor {name} has shape {shapes[name]}, the header implies {want}")


def check_architecture(summary: GGUFSummary, path: Path) -> None:
    if summary.architecture not in SUPPORTED_ARCHITECTURES:
        raise ConfigError(
            f"{path}: architecture {summary.architecture!r} is not supported; "
            f"import-gguf takes {', '.join(SUPPORTED_ARCHITECTURES)}"
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_out_dir(out_dir: Path) -> Path:
    """The folder to write: ``out_dir``, or where it leads when it is a link to a folder (the user's choice,
    as for every OUT); a link to nothing or to a file is refused in one line."""
    if out_dir.is_symlink():
        target = Path(os.path.realpath(out_dir))
        if not target.exists():
            raise ConfigError(
                f"{out_dir}: a symbolic link to {target}, which does not exist: create that folder, or give "
                "another path"
            )
        if not target.is_dir():
            raise ConfigError(f"{out_dir}: a symbolic link to {target}, which is not a folder; give a new folder")
        out_dir = target
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ConfigError(f"{out_dir} exists and is not an empty folder; give a new folder for the model")
    return out_dir


def import_gguf(gguf_file: str | Path, out_dir: str | Path, progress: bool = True) -> dict:
    """Write the model of ``gguf_file`` as a Hugging Face folder at ``out_dir``; returns a summary."""
    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    out_dir = _check_out_dir(out_dir)
    summary = read_summary(gguf_file)
    check_architecture(summary, gguf_file)

    import torch
    from tqdm import tqdm
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    stages = tqdm(total=4, desc="import-gguf", unit="stage", disable=not progress or None)
    started = time.perf_counter()
    partial = None
    verbosity = hf_logging.get_verbosity()
    try:
        hf_logging.set_verbosity_error()  # transformers warns about every dequantised tensor type
        source = dict(pretrained_model_name_or_path=str(gguf_file.parent), gguf_file=gguf_file.name)
        try:
            stages.set_postfix_str("tokenizer")
            tokenizer = AutoTokenizer.from_pretrained(**source)
            stages.update()
            stages.set_postfix_str("weights (dequantising)")
            loaded = AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32)
            stages.update()
        except (OSError, ValueError, KeyError, RuntimeError, TypeError, IndexError, ZeroDivisionError) as err:
            said = " ".join(str(err).split()).split(" For details look at the above report")[0]
            raise InputFormatError(f"{gguf_file}: cannot load the model ({type(err).__name__}: {said})") from None
        config = loaded.config.to_dict()
        config.pop("quantization_config", None)
        config = AutoConfig.for_model(**config)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        try:
            model.load_state_dict(loaded.state_dict(), strict=True)
        except RuntimeError as err:
            first = [line for line in str(err).splitlines()[1:] if "above report" not in line][:1] or [str(err)]
            raise InputFormatError(
                f"{gguf_file}: the weights do not fit a {summary.architecture} model ({first[0].strip()})"
            ) from None
        del loaded
        stages.set_postfix_str("saving")
        out_dir.parent.mkdir(parents=True, exist_ok=True)  # a fresh name of its own: nothing there to follow
        partial = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
        os.chmod(partial, 0o755)  # mkdtemp's 0700 would keep the model from other users
        model.save_pretrained(str(partial))
        tokenizer.save_pretrained(str(partial))
        record = {
            "gguf_file": gguf_file.name,
            "sha256": _sha256(gguf_file),
            "architecture": summary.architecture,
            "name": summary.name,
            "tensor_types": summary.tensor_types,
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "note": "weights dequantised to float32 from the GGUF tensor types above",
        }
        (partial / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
        stages.update()
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.replace(partial, out_dir)
        stages.update()
    except BaseException:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        hf_logging.set_verbosity(verbosity)
        stages.close()
    return {**record, "out_dir": str(out_dir), "seconds": round(time.perf_counter() - started, 1)}
