"""The RoutingRecorder on real tiny training runs: every update recorded, tables consistent."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aah_viz import coverage  # noqa: E402
from aah_viz.errors import ConfigError  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402
from instrumentation.config import AAHConfig  # noqa: E402
from instrumentation.model import AAHTransformer  # noqa: E402
from instrumentation.recorder import Recording, RoutingRecorder  # noqa: E402

pytestmark = pytest.mark.torch


class Witness:
    """An independent subscriber: what the model emitted, kept as plain host values."""

    def __init__(self):
        self.updates = []  # (step, layer, applied)
        self.windows = {}  # (step, layer) -> list of executed windows (last training forward)
        self.trees = {}  # (step, layer) -> level-0 groups
        self.features = {}  # (step, layer) -> the heads' level-0 clustering features, where emitted

    def __call__(self, ev):
        if not ev.training:
            return
        self.windows[(ev.step, ev.layer)] = ev.windows.tolist()
        if ev.updated:
            self.updates.append((ev.step, ev.layer, ev.applied))
            if ev.tree:
                self.trees[(ev.step, ev.layer)] = [list(g) for g in ev.tree[0].members]
            if ev.head_features is not None:
                self.features[(ev.step, ev.layer)] = ev.head_features.double().numpy().copy()


def train_tiny(
    run_dir,
    regime="full_adaptive",
    steps=14,
    detail="full",
    flush_every=4,
    seed=0,
    witness=None,
    record=True,
    **overrides,
):
    torch.manual_seed(seed)
    cfg = AAHConfig.from_preset("tiny", regime=regime, **overrides)
    model = AAHTransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    gen = torch.Generator().manual_seed(seed)
    handle = model.subscribe(witness) if witness is not None else None
    rec = RoutingRecorder(model, Recording(run_dir, detail, flush_every=flush_every, seed=seed)) if record else None
    with rec if rec is not None else _null():
        for step in range(steps):
            model.train()
            model.prepare_step(step)
            x = torch.randint(0, 256, (2, cfg.block_size + 1), generator=gen)
            loss = model(x[:, :-1], targets=x[:, 1:]).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if rec is not None:
                rec.step(step, loss=loss, lr=3e-3, tokens=x[:, :-1].numel())
                if step % 5 == 4:
                    rec.eval(step, val_loss=float(loss.detach()) + 0.1)
    if handle is not None:
        handle.remove()
    return model, cfg


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.fixture(scope="module")
def adaptive_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("rec") / "adaptive"
    witness = Witness()
    model, cfg = train_tiny(run_dir, witness=witness)
    return run_dir, witness, model, cfg


def test_run_validates_and_has_every_table(adaptive_run):
    run_dir, _, _, cfg = adaptive_run
    assert validate_run(run_dir) == []
    run = load_run(run_dir)
    assert run.manifest["status"] == "finished"
    assert run.manifest["regime"] == "full_adaptive"
    for table in ("heads", "tree", "branch", "scalars", "events"):
        assert len(run.table(table)) > 0, table


def test_every_routing_update_is_an_event(adaptive_run):
    run_dir, witness, _, cfg = adaptive_run
    events = load_run(run_dir).table("events")
    upd = events[events["kind"] == "routing_update"]
    recorded = sorted((int(s), int(l)) for s, l in zip(upd["step"], upd["layer"]))
    assert recorded == sorted((s, l) for s, l, _ in witness.updates)
    # both shadow (warm-up) and applied updates exist, and the detail says which
    details = [json.loads(d) for d in upd["detail"]]
    assert {d["applied"] for d in details} == {True, False}
    post = [(int(s), d) for s, d in zip(upd["step"], details) if d["applied"]]
    assert min(s for s, _ in post) == cfg.warmup_steps
    assert all(d["group_counts"] and d["path_mode"] for _, d in post)


def test_heads_table_holds_every_step_and_the_executed_windows(adaptive_run):
    run_dir, witness, _, cfg = adaptive_run
    heads = load_run(run_dir).table("heads")
    counts = heads.groupby("step").size()
    assert list(counts.index) == list(range(14))
    assert set(counts) == {cfg.n_layer * cfg.n_head}
    assert not heads.duplicated(["step", "layer", "head"]).any()
    windows = np.asarray(cfg.windows)
    assert (heads["window"].to_numpy() == windows[heads["window_idx"].to_numpy()]).all()
    for (step, layer), wins in witness.windows.items():
        got = heads[(heads["step"] == step) & (heads["layer"] == layer)].sort_values("head")["window"].tolist()
        assert got == wins, (step, layer)
    # warm-up executes the full window; raw_idx only on update steps
    warm = heads[heads["step"] < cfg.warmup_steps]
    assert (warm["window"] == cfg.block_size).all()
    upd_steps = {s for s, _, _ in witness.updates}
    cached = heads[~heads["step"].isin(upd_steps)]
    assert cached["raw_idx"].isna().all()
    assert heads[heads["step"] == cfg.warmup_steps]["raw_idx"].notna().all()


def test_tree_rows_agree_with_heads_groups(adaptive_run):
    run_dir, witness, _, cfg = adaptive_run
    run = load_run(run_dir)
    heads, tree = run.table("heads"), run.table("tree")
    assert set(zip(tree["step"], tree["layer"])) == set(witness.trees)
    for (step, layer), groups0 in witness.trees.items():
        t = tree[(tree["step"] == step) & (tree["layer"] == layer)]
        lvl0 = t[t["level"] == 0].sort_values("node")
        assert [list(m) for m in lvl0["members"]] == [sorted(g) for g in groups0]
        h = heads[(heads["step"] == step) & (heads["layer"] == layer)].sort_values("head")
        for level in sorted(t["level"].unique()):
            nodes = t[t["level"] == level]
            members = sorted(int(x) for m in nodes["members"] for x in m)
            assert members == list(range(cfg.n_head))  # every head in exactly one node per level
            for node, mem in zip(nodes["node"], nodes["members"]):
                assert set(h.iloc[list(mem)][f"group_l{level}"]) == {node}
        top = t["level"].max()
        assert t[t["level"] == top]["parent"].isna().all()
        assert t[t["level"] < top]["parent"].notna().all()
        # the margin is top-1 minus top-2 of the stored final logits
        for logits, margin in zip(t["logits"], t["margin"]):
            srt = np.sort(np.asarray(logits))
            assert margin == pytest.approx(srt[-1] - srt[-2], abs=1e-5)
        assert all(len(f) == 9 for f in t["features"])  # detail="full" keeps feature rows
    shadow = tree[tree["step"] < cfg.warmup_steps]
    assert shadow["shadow"].all() and not tree[tree["step"] >= cfg.warmup_steps]["shadow"].any()


def test_cluster_validity_rows_agree_with_the_emitted_features(adaptive_run):
    from sklearn.metrics import silhouette_score

    run_dir, witness, _, _ = adaptive_run
    run = load_run(run_dir)
    validity = run.table("cluster_validity")
    tree = run.table("tree")
    level0 = tree[tree["level"] == 0].drop_duplicates(["step", "layer"])
    assert sorted(zip(validity["step"], validity["layer"])) == sorted(zip(level0["step"], level0["layer"]))
    assessed = 0
    for row in validity.itertuples():
        groups = witness.trees[(row.step, row.layer)]
        assert row.n_groups == len(groups)
        feats = witness.features.get((row.step, row.layer))
        if feats is None:  # a fixed or frozen partition: nothing was clustered on this forward
            assert row.verdict == "undefined" and np.isnan(row.silhouette)
            continue
        labels = np.empty(len(feats), dtype=int)
        for gid, members in enumerate(groups):
            labels[members] = gid
        unit = feats / np.linalg.norm(feats, axis=1, keepdims=True)
        pairs = (unit @ unit.T)[np.triu_indices(len(feats), 1)]
        assert row.sim_min == pytest.approx(pairs.min(), abs=1e-5)
        assert row.sim_max == pytest.approx(pairs.max(), abs=1e-5)
        if 2 <= len(groups) < len(feats):
            assert row.silhouette == pytest.approx(silhouette_score(feats, labels, metric="cosine"), abs=1e-4)
            beats = row.silhouette > max(row.null_p95, row.refit_p95)
            assert row.verdict == ("real" if beats else "chance")
            assessed += 1
    assert assessed > 0


def test_acr_scalars_equal_what_heads_imply(adaptive_run):
    run_dir, _, _, cfg = adaptive_run
    run = load_run(run_dir)
    heads, scalars = run.table("heads"), run.table("scalars")
    T = cfg.block_size
    for name, fn in (
        ("acr", lambda w: coverage.acr(w, T, cfg.w_min)),
        ("acr_causal", lambda w: coverage.causal_coverage(w, T)),
    ):
        rows = scalars[scalars["name"] == name]
        per_layer = rows[rows["layer"].notna()]
        model_wide = rows[rows["layer"].isna()]
        assert len(per_layer) == 14 * cfg.n_layer and len(model_wide) == 14
        for (step, layer), grp in heads.groupby(["step", "layer"]):
            got = per_layer[(per_layer["step"] == step) & (per_layer["layer"] == layer)]["value"]
            assert got.item() == pytest.approx(fn(grp["window"].to_numpy()), rel=1e-12)
        for step, grp in heads.groupby("step"):
            table = grp.sort_values(["layer", "head"])["window"].to_numpy().reshape(cfg.n_layer, cfg.n_head)
            assert model_wide[model_wide["step"] == step]["value"].item() == pytest.approx(fn(table), rel=1e-12)
    # ACR drops below 1 once routing applies (windows smaller than T exist in this run)
    acr = scalars[(scalars["name"] == "acr") & scalars["layer"].isna()].set_index("step")["value"]
    assert (acr[acr.index < cfg.warmup_steps] == 1.0).all()


def test_branch_fractions_match_heads(adaptive_run):
    run_dir, _, _, cfg = adaptive_run
    run = load_run(run_dir)
    heads, branch = run.table("heads"), run.table("branch")
    for (step, layer), grp in heads.groupby(["step", "layer"]):
        b = branch[(branch["step"] == step) & (branch["layer"] == layer)]
        expected = grp["window"].value_counts(normalize=True).sort_index()
        assert dict(zip(b["window"], b["fraction"])) == pytest.approx(dict(expected))


def test_training_scalars_and_eval(adaptive_run):
    run_dir, _, model, cfg = adaptive_run
    run = load_run(run_dir)
    scalars = run.table("scalars")
    names = set(scalars["name"])
    for name in (
        "loss",
        "lr",
        "tokens_per_s",
        "step_time_s",
        "peak_mem_mb",
        "controller_grad_norm",
        "controller_weight_drift",
        "val_loss",
        "val_ppl",
        "acr",
        "acr_causal",
        "flops_ratio_est",
    ):
        assert name in names, name
    wide = scalars[scalars["layer"].isna()]
    loss = wide[wide["name"] == "loss"].sort_values("step")
    assert len(loss) == 14 and np.isfinite(loss["value"]).all()
    # the faithful model: no gradient reaches the controller, its weights never move
    assert (wide[wide["name"] == "controller_grad_norm"]["value"] == 0).all()
    assert (wide[wide["name"] == "controller_weight_drift"]["value"] == 0).all()
    val = wide[wide["name"] == "val_loss"].set_index("step")["value"]
    ppl = wide[wide["name"] == "val_ppl"].set_index("step")["value"]
    assert list(val.index) == [4, 9]
    assert np.allclose(np.exp(val), ppl)
    events = run.table("events")
    assert (events["kind"] == "warmup_end").sum() == 1
    assert int(events[events["kind"] == "warmup_end"]["step"].item()) == cfg.warmup_steps


def test_controller_health_moves_when_the_controller_trains(tmp_path):
    run_dir = tmp_path / "st"
    train_tiny(run_dir, steps=8, controller_training="straight_through")
    wide = load_run(run_dir).table("scalars")
    wide = wide[wide["layer"].isna()]
    grad = wide[wide["name"] == "controller_grad_norm"].set_index("step")["value"]
    drift = wide[wide["name"] == "controller_weight_drift"].set_index("step")["value"]
    assert grad.max() > 0
    assert drift.iloc[-1] > 0


def test_detail_levels(tmp_path):
    train_tiny(tmp_path / "light", steps=6, detail="light")
    train_tiny(tmp_path / "minimal", steps=6, detail="minimal")
    light, minimal = load_run(tmp_path / "light"), load_run(tmp_path / "minimal")
    tree = light.table("tree")
    assert len(tree) > 0 and all(len(f) == 0 for f in tree["features"])
    assert all(len(x) == 0 for x in tree["logits"]) and tree["margin"].notna().all()
    for table in ("tree", "branch"):
        t = minimal.table(table)
        assert t is None or len(t) == 0
    assert len(minimal.table("heads")) == 6 * 2 * 12
    assert "acr" in set(minimal.table("scalars")["name"])
    assert validate_run(tmp_path / "minimal") == []


def test_segments_appear_while_training_and_on_detach(tmp_path):
    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", regime="full_adaptive")
    model = AAHTransformer(cfg)
    run_dir = tmp_path / "live"
    rec = RoutingRecorder(model, Recording(run_dir, "full", flush_every=3)).attach()
    x = torch.randint(0, 256, (2, cfg.block_size + 1))
    for step in range(5):
        model.prepare_step(step)
        model(x[:, :-1], targets=x[:, 1:])
        rec.step(step)
    rec._wait()  # the cadence's write (steps 0-2) runs on the worker thread; steps 3-4 stay buffered
    live = load_run(run_dir)  # a run that is still being written
    assert sorted(live.table("heads")["step"].unique()) == [0, 1, 2]
    assert live.manifest["status"] == "running"
    rec.detach()
    done = load_run(run_dir)
    assert sorted(done.table("heads")["step"].unique()) == [0, 1, 2, 3, 4]
    assert done.manifest["status"] == "finished"


def test_detach_on_exception_removes_every_subscription(tmp_path):
    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", regime="full_adaptive")
    model = AAHTransformer(cfg)
    x = torch.randint(0, 256, (2, cfg.block_size + 1))
    with pytest.raises(RuntimeError, match="boom"):
        with RoutingRecorder(model, Recording(tmp_path / "boom", "full")) as rec:
            for step in range(3):
                model.prepare_step(step)
                model(x[:, :-1], targets=x[:, 1:])
                rec.step(step)
            assert all(layer.has_subscribers for layer in model.aah_layers())
            raise RuntimeError("boom")
    assert not any(layer.has_subscribers for layer in model.aah_layers())
    run = load_run(tmp_path / "boom")
    assert run.manifest["status"] == "failed"
    assert sorted(run.table("heads")["step"].unique()) == [0, 1, 2]
    assert "error" in set(run.table("events")["kind"])
    assert validate_run(tmp_path / "boom") == []
    # detaching twice, or a recorder never attached, is harmless
    rec.detach()
    RoutingRecorder(model, Recording(tmp_path / "never")).detach()


def test_shallow_freeze_records_its_freeze_and_topology(tmp_path):
    run_dir = tmp_path / "freeze"
    witness = Witness()
    _, cfg = train_tiny(run_dir, regime="shallow_freeze", steps=14, witness=witness)
    run = load_run(run_dir)
    events = run.table("events")
    freeze = events[events["kind"] == "freeze"]
    assert sorted(freeze["layer"].astype(int)) == list(range(cfg.n_layer))
    assert set(freeze["step"]) == {cfg.warmup_steps}
    tree = run.table("tree")
    for layer, detail in zip(freeze["layer"].astype(int), freeze["detail"]):
        topology = json.loads(detail)["topology"]
        later = tree[(tree["layer"] == layer) & (tree["step"] >= cfg.warmup_steps) & (tree["level"] == 0)]
        for step, rows in later.groupby("step"):
            assert [list(c) for c in rows.sort_values("node")["children"]] == topology[0], step


def test_baseline_regimes_record_static_windows(tmp_path):
    train_tiny(tmp_path / "full", regime="full_attention", steps=4)
    train_tiny(tmp_path / "sliding", regime="sliding_window", steps=4, window=16)
    full, sliding = load_run(tmp_path / "full"), load_run(tmp_path / "sliding")
    fh, sh = full.table("heads"), sliding.table("heads")
    assert (fh["window"] == 64).all() and (fh["window_idx"] == 3).all()
    assert (sh["window"] == 16).all() and (sh["window_idx"] == 1).all()
    acr = full.table("scalars")
    assert (acr[acr["name"] == "acr"]["value"] == 1.0).all()
    s_acr = sliding.table("scalars")
    assert s_acr[(s_acr["name"] == "acr")]["value"].tolist() == pytest.approx(
        [16 / 64] * len(s_acr[s_acr["name"] == "acr"])
    )


def test_backend_fallback_is_an_event(tmp_path):
    from instrumentation.backends import get_backend

    _, resolved, reason = get_backend("flash", device=torch.device("cpu"), training=True, dropout_p=0.0)
    if reason is None:
        pytest.skip("the flash backend runs here: nothing falls back")
    train_tiny(tmp_path / "fb", steps=2, attention_backend="flash")
    events = load_run(tmp_path / "fb").table("events")
    fb = events[events["kind"] == "fallback"]
    assert len(fb) == 1
    detail = json.loads(fb["detail"].item())
    assert detail["reason"] and detail["backend"] != "flash"


def test_the_recorder_reads_any_routed_layers_through_aah_routing(tmp_path):
    """A wrapper (e.g. a patched Hugging Face model) carrying the RoutedLayers as ``aah_routing``,
    also inside a data-parallel ``module``, is recorded like the model itself; others are refused."""
    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", regime="full_adaptive")
    model = AAHTransformer(cfg)

    class Patched(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            object.__setattr__(self, "aah_routing", inner)

    class DataParallel(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

    witness = Witness()
    handle = model.subscribe(witness)
    gen = torch.Generator().manual_seed(0)
    with RoutingRecorder(DataParallel(Patched(model)), Recording(tmp_path / "run", "full", flush_every=2)) as rec:
        for step in range(6):
            model.prepare_step(step)
            x = torch.randint(0, 256, (2, cfg.block_size), generator=gen)
            with torch.no_grad():
                model(x)
            rec.step(step)
    handle.remove()
    heads = load_run(tmp_path / "run").table("heads")
    got = heads[heads["step"] == 5].sort_values(["layer", "head"])["window"].tolist()
    assert got == [w for layer in range(cfg.n_layer) for w in witness.windows[(5, layer)]]
    with pytest.raises(ConfigError, match="lacks cfg, attention_layers"):
        RoutingRecorder(torch.nn.Linear(2, 2), Recording(tmp_path / "other"))


def test_a_recording_refuses_an_unknown_detail_and_a_flush_cadence_below_one(tmp_path):
    with pytest.raises(ConfigError, match="detail 'everything' is not one of full, light, minimal"):
        Recording(tmp_path / "run", "everything")
    with pytest.raises(ConfigError, match="flush_every must be >= 1, got 0"):
        Recording(tmp_path / "run", flush_every=0)


def test_an_integrations_keywords_split_into_the_recording_and_the_recorders_options(tmp_path):
    from instrumentation.recorder.recording import recording_and_options

    recording, options = recording_and_options(
        str(tmp_path / "run"), "light", {"flush_every": 7, "seed": 3, "rank": 1, "background": False}
    )
    assert recording == Recording(tmp_path / "run", "light", flush_every=7, seed=3)
    assert options == {"rank": 1, "background": False}
