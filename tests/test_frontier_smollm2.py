"""The frontier on SmolLM2-135M and WikiText-2 (slow; skipped without the model or the text): every
configuration on the same held-out blocks, the unpatched row recomputed here with the model itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.torch]
REPO = Path(__file__).resolve().parents[1]
T = 128


def test_smollm2_frontier_on_wikitext_matches_the_model_itself(smollm2_dir, wikitext_path, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from instrumentation.data import cut_blocks
    from instrumentation.measure.frontier.plan import split_text

    data = tmp_path / "wiki.txt"
    lines = wikitext_path.read_text(encoding="utf-8").splitlines(keepends=True)[:600]
    data.write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "fr"
    cmd = [sys.executable, "-m", "aah_viz", "frontier", str(smollm2_dir), "--data", str(data), "--out", str(out)]
    cmd += ["--seq-len", str(T), "--windows", "16,32,64,128", "--adapt-steps", "2", "--regimes", "full_adaptive"]
    cmd += ["--eval-blocks", "2", "--profile-blocks", "1", "--timing-pairs", "2", "--threads", "2", "--json"]
    proc = subprocess.run(cmd + ["--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = {row["configuration"]: row for row in json.loads(proc.stdout)}
    want = {"unpatched", "full_attention", "sliding_window_16", "sliding_window_32", "sliding_window_64"}
    want |= {"head_windows_p95", "full_adaptive_zero_shot", "full_adaptive_adapted"}
    assert set(table) == want

    # the unpatched perplexity, from the model and its tokenizer on the held-out text, computed here
    _, held_out, _ = split_text(data, 0.1)
    tok = transformers.AutoTokenizer.from_pretrained(smollm2_dir)
    ids = np.asarray(tok(held_out, add_special_tokens=False)["input_ids"], dtype=np.int64)
    blocks = torch.from_numpy(cut_blocks(ids, T)[:2])
    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir).eval()
    with torch.no_grad():
        logits = model(blocks[:, :-1], use_cache=False).logits
        # in float64: a float32 log-softmax over 49,152 tokens is off by about 1e-4 in perplexity here
        nll = torch.nn.functional.cross_entropy(logits.double().transpose(1, 2), blocks[:, 1:], reduction="sum")
    ppl = float(torch.exp(nll / blocks[:, 1:].numel()))
    assert table["unpatched"]["ppl"] == pytest.approx(ppl, rel=1e-4)
    assert table["full_attention"]["ppl"] == pytest.approx(ppl, rel=1e-4)  # the patch at full attention is exact
    for w in (16, 32, 64):
        row = table[f"sliding_window_{w}"]
        assert row["acr"] == pytest.approx(w / T) and row["ppl"] > ppl  # less context, worse on real text
    assert table["full_adaptive_adapted"]["acr"] < 1.0
