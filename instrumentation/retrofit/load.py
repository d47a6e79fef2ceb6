"""Loading what the retrofit and evaluation commands run: a Hugging Face model folder, its tokens.

A model folder is what ``save_pretrained`` writes (``config.json`` and the weights); nothing is
downloaded. Text is tokenised with the folder's own tokenizer when it has one, else as bytes
(for models whose vocabulary holds the 256 byte ids, e.g. the tests' random models).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from aah_viz.errors import ConfigError, InputFormatError, RunLogError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def is_model_dir(path: str | Path) -> bool:
    return (Path(path) / "config.json").is_file()


def recorded_model_path(model_dir: str | Path, run_dir: str | Path) -> str:
    """How a run records its base model folder: relative to the run folder where a relative path exists
    (the two then move together), else absolute."""
    target = Path(model_dir).resolve()
    try:
        return os.path.relpath(target, Path(run_dir).resolve())
    except ValueError:  # another drive (Windows)
        return str(target)


def run_base_model(run_dir: str | Path, manifest: dict, override: str | Path | None = None) -> Path:
    """The base model folder of a retrofit run: ``override`` (``--model``) if given, else the manifest's
    ``base_model`` (relative to the run folder, or absolute as older runs record it)."""
    if override is not None:
        if not is_model_dir(override):
            raise ConfigError(f"--model {override} is not a Hugging Face model folder (no config.json)")
        return Path(override)
    recorded = manifest.get("base_model")
    if not recorded:
        raise RunLogError(f"{run_dir}: its manifest names no base_model; it was not written by aah-viz retrofit")
    path = Path(run_dir) / recorded  # an absolute record stays as it is
    if is_model_dir(path):
        return path
    given = manifest.get("base_model_as_given") or recorded
    raise ConfigError(
        f"{run_dir}: the base model it was adapted from ({given}) is not at {path} any more; "
        "give --model DIR to point at the base model folder"
    )


def load_causal_lm(model_dir: str | Path, device: str = "cpu", dtype: str | None = None) -> torch.nn.Module:
    """``AutoModelForCausalLM.from_pretrained`` on a local folder (no network), on ``device``."""
    model_dir = Path(model_dir)
    if not is_model_dir(model_dir):
        raise ConfigError(
            f"{model_dir} is not a Hugging Face model folder (no config.json); give the folder save_pretrained wrote"
        )
    from transformers import AutoModelForCausalLM

    kwargs = {"local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = getattr(torch, dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), **kwargs)
    except Exception as err:  # noqa: BLE001 - a refused pickle is one line in our words
        from instrumentation.training.checkpoint import refusal

        refused = refusal(model_dir, err)
        if refused:
            raise ConfigError(refused) from None
        if isinstance(err, (OSError, ValueError)):
            raise ConfigError(f"cannot load the model in {model_dir}: {err}") from err
        raise
    return model.to(device)


def text_tokens(path: str | Path, model_dir: str | Path | None, vocab_size: int) -> np.ndarray:
    """Token ids of a UTF-8 text file: the model folder's tokenizer if it has one, else bytes."""
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"--data {path} is not a file; give a plain-text (UTF-8) file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFormatError(f"{path}: not UTF-8 text (byte {err.start}); convert it to UTF-8 first") from err
    return np.asarray(text_encoder(model_dir, vocab_size)(text), dtype=np.int64)


def text_encoder(model_dir: str | Path | None, vocab_size: int) -> Callable[[str], list[int]]:
    """Text -> token ids, no special tokens added: the model folder's tokenizer if it has one, else bytes."""
    if model_dir is not None and any((Path(model_dir) / f).is_file() for f in TOKENIZER_FILES):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        return lambda text: list(tok(text, add_special_tokens=False)["input_ids"])
    if vocab_size < 256:
        raise ConfigError(
            f"the model has no tokenizer in its folder and its vocabulary ({vocab_size}) cannot hold byte tokens"
        )
    return lambda text: list(text.encode("utf-8"))
