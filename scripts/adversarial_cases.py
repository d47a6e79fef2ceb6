"""The hostile world of ``scripts/adversarial_pass.py``: run folders damaged the ways a hostile user would
damage them (links out, FIFOs, hard links, deep JSON, crafted progress, lock and summary files, huge numbers)
and the command lines tried against them, each with what a careful program does (``want``).

``want``: "refuse" (exit 2, one ``aah-viz: error:`` line holding every word of ``words``), "accept" (exit 0)
or "either" (exit 0, or a one-line refusal). ``multi``: the command reports several lines by design
(``validate``); then the words must appear anywhere in its output.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

DECOY = b"not the run's: a decoy outside it"
LONG = "x" * 100_000


@dataclass
class Case:
    family: str
    name: str
    argv: list[str]
    want: str = "refuse"
    words: tuple[str, ...] = ()
    multi: bool = False
    guard: list[str] = field(default_factory=list)  # files inside the world that must survive unchanged


# ------------------------------------------------------------------------------------------ damage
def _decoy_folder(outside: Path, name: str, like: Path | None) -> Path:
    folder = outside / f"decoy-{name.strip('.')}"
    folder.mkdir(parents=True)
    if like is not None and like.is_dir():
        shutil.copytree(like, folder, dirs_exist_ok=True)
    for leaf in ("step-00000001.pt", "step-00000001.safetensors", "meta.json", "events.out.tfevents.1.decoy"):
        (folder / leaf).write_bytes(DECOY)
    return folder


def link_out(run: Path, entry: str, outside: Path) -> None:
    """``run/entry`` becomes a link to an outside copy of itself beside decoy files."""
    target = run / entry
    if target.is_file() or entry.endswith(".json") or entry.startswith(".writer"):
        copy = outside / f"decoy-{entry.strip('.')}"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(target.read_bytes() if target.is_file() and entry.endswith(".json") else DECOY)
        target.unlink(missing_ok=True)
        target.symlink_to(copy)
        return
    folder = _decoy_folder(outside, entry, target if target.is_dir() else None)
    if target.is_dir():
        shutil.rmtree(target)
    target.symlink_to(folder, target_is_directory=True)


def hard_link(run: Path, entry: str, outside: Path) -> None:
    """A file of the run (``entry``, or the first file in that folder) becomes a hard link to an outside file."""
    target = run / entry
    if target.is_dir():
        target = sorted(p for p in target.iterdir() if p.is_file())[0]
    elsewhere = outside / f"hard-{target.name}"
    elsewhere.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(target, elsewhere)
    target.unlink()
    os.link(elsewhere, target)


def fifo(run: Path, entry: str, outside: Path) -> None:
    target = run / entry
    if target.is_dir():
        target = sorted(p for p in target.iterdir() if p.suffix == ".parquet")[0]
    target.unlink(missing_ok=True)
    os.mkfifo(target)


def deep(run: Path, entry: str, outside: Path) -> None:
    (run / entry).write_text("[" * 200_000 + "]" * 200_000)


def huge_config(run: Path, entry: str, outside: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.setdefault("config", {})["n_layer"] = 10**9
    (run / "manifest.json").write_text(json.dumps(manifest))


def huge_top(run: Path, entry: str, outside: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["n_layer"], manifest["windows"] = 10**30, [1e308, -5]
    (run / "manifest.json").write_text(json.dumps(manifest))


def crafted_lock(run: Path, entry: str, outside: Path) -> None:
    (run / ".writer.lock").write_text(json.dumps({"pid": 1, "host": "x" * 5000, "started": 1e308}) + "\n")


def crafted_summary(run: Path, entry: str, outside: Path) -> None:
    summary = run / "summary.json"
    data = json.loads(summary.read_text()) if summary.is_file() else {}
    data = {k: (10**30 if isinstance(v, (int, float)) else v) for k, v in data.items()} | {"segments": "../../etc"}
    summary.write_text(json.dumps(data))


def plain_file(run: Path, entry: str, outside: Path) -> None:
    target = run / entry
    if target.is_dir():
        shutil.rmtree(target)
    target.write_text("a plain file where a folder is kept")


def crafted_progress(run: Path, entry: str, outside: Path) -> None:
    folder = run / entry
    folder.mkdir(exist_ok=True)
    (folder / "meta.json").write_text(json.dumps({"documents": 10**30, "done": [-1, 1e308], "version": "../x"}))


def self_loop(run: Path, entry: str, outside: Path) -> None:
    target = run / entry
    if target.is_dir():
        shutil.rmtree(target)
    target.symlink_to(target.name)  # a link to itself: ELOOP for whoever follows it


# name -> (damage, the entry it damages, words a refusal names)
SYNTHETIC_DAMAGE = {
    "link-heads": (link_out, "heads", ("heads", "link")),
    "link-manifest": (link_out, "manifest.json", ("manifest.json", "link")),
    "link-summary": (link_out, "summary.json", ("summary.json", "link")),
    "link-lock": (link_out, ".writer.lock", (".writer.lock", "link")),
    "link-tensorboard": (link_out, "tensorboard", ("tensorboard", "link")),
    "loop-heads": (self_loop, "heads", ("heads",)),
    "hard-segment": (hard_link, "heads", ("hard",)),
    "hard-summary": (hard_link, "summary.json", ("summary.json", "hard")),
    "fifo-manifest": (fifo, "manifest.json", ("manifest.json",)),
    "fifo-segment": (fifo, "heads", ("heads",)),
    "fifo-summary": (fifo, "summary.json", ("summary.json",)),
    "deep-manifest": (deep, "manifest.json", ("manifest.json",)),
    "deep-summary": (deep, "summary.json", ()),
    "huge-config": (huge_config, "manifest.json", ("n_layer",)),
    "huge-top": (huge_top, "manifest.json", ()),
    "crafted-lock": (crafted_lock, ".writer.lock", ()),
    "crafted-summary": (crafted_summary, "summary.json", ()),
}
TRAINED_DAMAGE = {
    "link-checkpoints": (link_out, "checkpoints", ("checkpoints", "link")),
    "hard-checkpoint": (hard_link, "checkpoints", ("hard",)),
    "file-checkpoints": (plain_file, "checkpoints", ("checkpoints",)),
    "link-probe-progress": (link_out, ".probe-progress", (".probe-progress", "link")),
    "file-probe-progress": (plain_file, ".probe-progress", (".probe-progress",)),
    "crafted-probe-progress": (crafted_progress, ".probe-progress", ()),
    "deep-probe-meta": (crafted_progress, ".probe-progress", ()),
    "link-lens-progress": (link_out, ".lens-progress", (".lens-progress", "link")),
    "file-lens-progress": (plain_file, ".lens-progress", (".lens-progress",)),
    "link-tensorboard": (link_out, "tensorboard", ("tensorboard", "link")),
    "link-summary": (link_out, "summary.json", ("summary.json", "link")),
    "deep-manifest": (deep, "manifest.json", ("manifest.json",)),
}
# damage whose refusal by a reader is not required: a careful reader may also go on (with a warning)
READABLE = {
    "hard-segment",
    "crafted-lock",
    "crafted-summary",
    "deep-summary",
    "huge-top",
    "crafted-probe-progress",
    "deep-probe-meta",
}


# damage of an entry that only its own command reads: the others may go on
USERS = {"file-probe-progress": {"probe"}, "file-lens-progress": {"lens"}, "crafted-probe-progress": {"probe"}}


def damaged_copies(base: Path, damage: dict, root: Path) -> dict[str, Path]:
    """One copy of ``base`` per damage, under ``root``; the outside folder of each is ``root/outside/NAME``."""
    made = {}
    for name, (how, entry, _) in damage.items():
        run = root / name
        shutil.copytree(base, run, symlinks=True)
        how(run, entry, root / "outside" / name)
        if name == "deep-probe-meta":
            (run / entry / "meta.json").write_text("[" * 200_000 + "]" * 200_000)
        made[name] = run
    (root / "outside").mkdir(exist_ok=True)
    return made
