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
    return GGUFSummary(architecture, name if isinstance(name, str) else None, dict(types), n_tensors)


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


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ConfigError(f"{out_dir} exists and is not an empty folder; give a new folder for the model")


def import_gguf(gguf_file: str | Path, out_dir: str | Path, progress: bool = True) -> dict:
    """Write the model of ``gguf_file`` as a Hugging Face folder at ``out_dir``; returns a summary."""
    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    _check_out_dir(out_dir)
    summary = read_summary(gguf_file)
    check_architecture(summary, gguf_file)

    import torch
    from tqdm import tqdm
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    stages = tqdm(total=4, desc="import-gguf", unit="stage", disable=not progress or None)
    started = time.perf_counter()
    partial = out_dir.parent / f".{out_dir.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
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
        except (OSError, ValueError, KeyError, RuntimeError, TypeError) as err:
            raise InputFormatError(f"{gguf_file}: cannot load the model ({type(err).__name__}: {err})") from None
        config = loaded.config.to_dict()
        config.pop("quantization_config", None)
        config = AutoConfig.for_model(**config)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        try:
            model.load_state_dict(loaded.state_dict(), strict=True)
        except RuntimeError as err:
            first = str(err).splitlines()[1:2] or [str(err)]
            raise InputFormatError(
                f"{gguf_file}: the weights do not fit a {summary.architecture} model ({first[0].strip()})"
            ) from None
        del loaded
        stages.set_postfix_str("saving")
        partial.mkdir(parents=True)
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
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        hf_logging.set_verbosity(verbosity)
        stages.close()
    return {**record, "out_dir": str(out_dir), "seconds": round(time.perf_counter() - started, 1)}
