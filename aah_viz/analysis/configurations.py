"""Which runs may be averaged together: the same model, sequence length, candidate windows and length of
training.

A mean over seeds means something only over runs of one configuration. Runs of a byte-level model
at T = 128 and adaptations of a pretrained model at T = 512 share regime names, not results, so
every page that pools runs splits them by :func:`configuration_of` first (pure, from manifests).
The plain-attention baseline executes no candidate window, so it joins every group of its model
and sequence length (as the export's tables do). Within a configuration, runs of one regime set up
differently (sink tokens, a sweep's cell) are not seeds of one experiment either: :func:`setup_names`
names each setup by the settings that tell its runs apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from aah_viz.method import RETIRED_KEYS

BASELINE = "full_attention"  # its candidate windows are never in effect


def model_of(manifest: Mapping) -> str:
    """The model a run trained or adapted: a pretrained model's folder name, else the size preset."""
    retrofit = manifest.get("retrofit") if isinstance(manifest.get("retrofit"), Mapping) else {}
    config = manifest.get("config") if isinstance(manifest.get("config"), Mapping) else {}
    for value in (retrofit.get("model_dir"), config.get("model_dir"), manifest.get("probed_model")):
        if value:
            return PurePosixPath(str(value).replace("\\", "/")).name or str(value)
    preset = manifest.get("preset") or config.get("preset")
    if preset and ("/" in str(preset) or "\\" in str(preset)):  # a retrofit names its model folder here
        return PurePosixPath(str(preset).replace("\\", "/")).name
    if preset:
        return f"preset {preset}"
    shape = (manifest.get("n_layer"), manifest.get("n_head"))
    return f"{shape[0]} layers x {shape[1]} heads" if all(shape) else "unknown model"


def configuration_of(manifest: Mapping) -> tuple[str, int | None, tuple[int, ...], int | None]:
    """(model, sequence length, candidate windows, planned training steps); the baseline's windows are
    ``()``; steps are None where the manifest plans none (an evaluation, a probe). Runs trained for
    different lengths are not seeds of one experiment: their final values differ by design."""
    seq_len = manifest.get("seq_len")
    seq_len = int(seq_len) if isinstance(seq_len, (int, float)) else None
    windows = () if manifest.get("regime") == BASELINE else tuple(int(w) for w in manifest.get("windows") or ())
    steps = manifest.get("steps")
    steps = int(steps) if isinstance(steps, (int, float)) and not isinstance(steps, bool) else None
    return (model_of(manifest), seq_len, windows, steps)


def configuration_label(cfg: tuple, parts=range(4)) -> str:
    """``preset small, T = 128, windows 16/32/64/128, 280 steps`` (words a reader can match to a run);
    ``parts``: which of (model, T, windows, steps) to say (``[3]``: ``280 steps``)."""
    model, seq_len, windows, steps = cfg
    said = {
        0: str(model),
        1: f"T = {seq_len}" if seq_len is not None else "T unknown",
        2: "windows " + "/".join(str(w) for w in windows) if windows else "full attention only",
        3: f"{steps:,} steps" if steps is not None else "",
    }
    return ", ".join(said[i] for i in parts if said[i])


def _configuration_groups(manifests: Mapping[str, Mapping]) -> dict[tuple, list[str]]:
    """``{key: manifest}`` -> ``{configuration: keys}``; a baseline joins every group of its model, T and
    steps, or forms its own when there is none."""
    groups: dict[tuple, list[str]] = {}
    baselines: list[tuple[str, tuple]] = []
    for key, manifest in manifests.items():
        cfg = configuration_of(manifest)
        if cfg[2]:
            groups.setdefault(cfg, []).append(key)
        else:
            baselines.append((key, cfg))
    for key, cfg in baselines:
        homes = [g for g in groups if (g[0], g[1], g[3]) == (cfg[0], cfg[1], cfg[3])]
        for g in homes:
            groups[g].append(key)
        if not homes:
            groups.setdefault(cfg, []).append(key)
    return groups


def split_by_configuration(manifests: Mapping[str, Mapping]) -> list[tuple[str, list[str]]]:
    """``{key: manifest}`` -> ``[(label, keys)]``, the largest group first (then by label); a baseline
    joins every group of its model and T, or forms its own when there is none."""
    out = [(configuration_label(cfg), keys) for cfg, keys in _configuration_groups(manifests).items()]
    return sorted(out, key=lambda g: (-len(g[1]), g[0]))


# Settings that are not part of what a run computes (where it ran, what it recorded, how it is named) or
# that the configuration above already names (model, T, windows, steps), and the retired keys that never did
# anything (a manifest written before their removal records them; one written after does not): never a reason
# to split runs.
_NOT_SETTINGS = {
    "regime", "preset", "seed", "model_dir", "source", "kind", "head_groups", "windows", "block_size", "n_layer",
    "n_head", "n_embd", "n_ff", "vocab_size", "attention_backend", "device", "threads", "steps", *RETIRED_KEYS,
}  # fmt: skip
_RETROFIT_SETTINGS = ("lr", "weight_decay", "grad_clip", "lr_warmup_steps", "batch_size")


def settings_of(manifest: Mapping) -> dict[str, object]:
    """The settings a run computed with, as ``name -> value``: the model config's keys (``sink_tokens``),
    the training's (``train.lr``) and an adaptation's overrides and hyperparameters, beside the regime."""
    out: dict[str, object] = {}
    config = manifest.get("config") if isinstance(manifest.get("config"), Mapping) else {}
    out.update({k: v for k, v in config.items() if k not in _NOT_SETTINGS and not isinstance(v, Mapping)})
    out.update({k: v for k, v in _known_defaults(manifest, config).items() if k not in out})
    for section in ("train", "retrofit"):
        part = manifest.get(section) if isinstance(manifest.get(section), Mapping) else {}
        wanted = _RETROFIT_SETTINGS if section == "retrofit" else [k for k in part if k not in _NOT_SETTINGS]
        out.update({f"train.{k}": part[k] for k in wanted if k in part and not isinstance(part[k], Mapping)})
        overrides = part.get("overrides") if section == "retrofit" else None
        if isinstance(overrides, Mapping):
            out.update({k: v for k, v in overrides.items() if k not in _NOT_SETTINGS})
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in out.items()}


def _known_defaults(manifest: Mapping, config: Mapping) -> dict[str, object]:
    """The flags a config written before they existed ran with: its regime's value (``aah_viz.regimes``),
    so a manifest lacking one is set up as another recording that value. Only for a run with a config: the
    light side knows no other key's default (the model's, ``instrumentation.config``, needs torch)."""
    from aah_viz.regimes import BASE_FLAGS, REGIMES

    row = REGIMES.get(str(manifest.get("regime")))
    return {k: row.flag(k) for k in BASE_FLAGS} if config and row is not None else {}


def setup_names(manifests: Mapping[str, Mapping], by: str = "regime") -> dict[str, str]:
    """``{key: manifest}`` -> ``{key: name of its setup}``: its regime (or its value of the flat field ``by``),
    then each setting telling it apart from the other runs of that regime: ``full_adaptive, sink_tokens=4``.
    Runs with the same name differ in nothing but their seed, so only they are repeats or seeds of one
    setup; a setting one manifest records and another lacks (an older version) counts as a difference,
    named ``setting=unrecorded`` only where the name would otherwise be another setup's.
    A setting's value shared by most runs of the regime (on a tie, an unset one) is left out of the names
    (``full_adaptive`` beside ``full_adaptive, sink_tokens=4``). Grouped by another field (a seed), runs of
    different regimes are named apart by their regime, not by the settings their regimes set."""
    from aah_viz.analysis.manifest_fields import flat_fields

    values = {k: (m.get(by) if by == "regime" else flat_fields(m).get(by)) for k, m in manifests.items()}
    regimes = {k: {"regime": m.get("regime")} for k, m in manifests.items()}
    settings = {k: settings_of(m) for k, m in manifests.items()}
    skip = {by, by.removeprefix("config.")}
    extra: dict[str, list[str]] = {k: [] for k in manifests}
    for value in dict.fromkeys(values.values()):
        members = [k for k in manifests if values[k] == value]
        if by != "regime":
            for k, said in _telling_apart(members, regimes, skip).items():
                extra[k] += said
        for regime in dict.fromkeys(regimes[k]["regime"] for k in members):
            alike = [k for k in members if regimes[k]["regime"] == regime]
            for k, said in _telling_apart(alike, settings, skip).items():
                extra[k] += said
    full = {k: ", ".join([str(values[k]), *extra[k]]) for k in manifests}
    # a setting an older manifest lacks ("train.data=unrecorded") is left out of the name wherever the
    # names still tell the setups apart; only where two setups would share a name does it stay
    short = {k: ", ".join([str(values[k]), *(e for e in extra[k] if not e.endswith("=" + _UNSET))]) for k in manifests}
    behind: dict[str, set[str]] = {}
    for k in manifests:
        behind.setdefault(short[k], set()).add(full[k])
    return {k: short[k] if len(behind[short[k]]) == 1 else full[k] for k in manifests}


def setup_groups(manifests: Mapping[str, Mapping], by: str = "regime") -> dict[str, str]:
    """``{key: manifest}`` -> ``{key: the full name of its group}``: its setup (:func:`setup_names`: its value
    of the flat field ``by`` and every setting telling it from the other runs of that value), with, where the
    runs hold several configurations, what tells its configuration from the others in brackets
    (``full_adaptive [280 steps]``; ``full_adaptive [preset small, T = 128, windows 16/32/64/128]`` beside
    SmolLM2's). Settings are told apart within a configuration: across two, the configuration already names
    them (a retrofit's hyperparameters beside a byte-level run's). Runs with one name are seeds of one setup
    and one configuration: the only runs any page, figure or table averages together."""
    groups = _configuration_groups(manifests)
    order = sorted(groups.items(), key=lambda g: (-len(g[1]), configuration_label(g[0])))
    differ = [i for i in range(4) if len({cfg[i] for cfg in groups}) > 1]
    where: dict[str, tuple] = {}
    for cfg, members in order:
        for k in members:  # a baseline in several: named with the largest
            where.setdefault(k, cfg)
    out: dict[str, str] = {}
    for cfg, _ in order:
        mine = {k: manifests[k] for k in manifests if where[k] == cfg}
        if not mine:
            continue
        names = setup_names(mine, by=by)
        if len(groups) > 1:
            label = configuration_label(cfg, differ) or configuration_label(cfg)
            names = {k: f"{n} [{label}]" for k, n in names.items()}
        out.update(names)
    return {k: out[k] for k in manifests}


def _telling_apart(members: list[str], settings: Mapping[str, Mapping], skip) -> dict[str, list[str]]:
    """run -> ``name=value`` of each setting whose values differ among ``members``, but for the value most
    of them share (on a tie, an unset one)."""
    fields = set().union(*(settings[k] for k in members)) - set(skip)
    differ = sorted(f for f in fields if len({repr(settings[k].get(f)) for k in members}) > 1)
    out: dict[str, list[str]] = {k: [] for k in members}
    for f in differ:
        counts: dict[str, int] = {}
        for k in members:
            counts[repr(settings[k].get(f))] = counts.get(repr(settings[k].get(f)), 0) + 1
        top = [v for v, n in counts.items() if n == max(counts.values())]
        common = top[0] if len(top) == 1 else ("None" if "None" in top else None)
        for k in members:
            if repr(settings[k].get(f)) != common:
                out[k].append(f"{f}={_text(settings[k].get(f, _UNSET))}")
    return out


_UNSET = "unrecorded"  # a manifest without the key: written by a version that did not have it


def _text(value) -> str:
    return "/".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


LONG_TICK = 24  # characters: a longer setup name stands on an axis or in a legend as S1, S2, ...


def setup_ticks(names: list[str], keyed=None) -> list[str]:
    """The short marks of these setups: each name, or S1, S2, ... (numbered in this order) for a name too
    long to stand on a shared axis (a setup spelling out its settings), or for each name ``keyed(name)``
    picks."""
    keyed = keyed or (lambda n: len(n) > LONG_TICK)
    long = list(dict.fromkeys(n for n in names if keyed(n)))
    return [f"S{long.index(n) + 1}" if n in long else n for n in names]


def group_value(manifest: Mapping, by: str = "regime"):
    """A run's value of the flat field ``by`` (what its group is named by first)."""
    from aah_viz.analysis.manifest_fields import flat_fields

    return manifest.get(by) if by == "regime" else flat_fields(manifest).get(by)


def group_labels(manifests: Mapping[str, Mapping], groups: Mapping[str, str], by: str = "regime") -> dict[str, str]:
    """full group name (:func:`setup_groups`) -> its short name for a legend: the group's value where no other
    group shares it, else the value and a setup key (``full_adaptive · S2``; only ``S2`` for a value too
    long to stand in a legend), numbered as Compare's axis marks (:func:`setup_ticks`) over the names in
    sorted order (the legend's order). Never a setting's value: the full name is for the hover and a table."""
    full = sorted(set(groups.values()), key=str)
    value = {groups[k]: str(group_value(m, by)) for k, m in manifests.items() if k in groups}
    counts: dict[str, int] = {}
    for name in full:
        counts[value.get(name, name)] = counts.get(value.get(name, name), 0) + 1
    out = {}
    for name, tick in zip(full, setup_ticks(full, keyed=lambda n: counts[value.get(n, n)] > 1)):
        v = value.get(name, name)
        out[name] = (
            v if tick == name and len(v) <= 2 * LONG_TICK else (f"{v} · {tick}" if len(v) <= LONG_TICK else tick)
        )
    return out


def group_rows(groups: Mapping[str, str], labels: Mapping[str, str]) -> list[dict]:
    """One row a group, in the legend's order: its short name, how many runs it averages, its full name
    (every setting telling it apart, its configuration) and its runs: the table beside a grouped chart."""
    members: dict[str, list[str]] = {}
    for k, name in groups.items():
        members.setdefault(name, []).append(k)
    return [
        {"group": labels.get(name, name), "runs": len(keys), "setup": name, "run names": ", ".join(sorted(keys))}
        for name, keys in sorted(members.items(), key=lambda kv: str(kv[0]))
    ]
