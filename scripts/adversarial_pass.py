"""An adversarial pass over aah-viz, as a hostile user (or one making mistakes) would try it: hostile run
folders (links out, FIFOs, hard links, deep JSON, crafted progress, lock and summary files, huge numbers)
under every command that reads or writes runs, wrong arguments across the commands, and dashboard addresses
in Chromium (a Streamlit server on 127.0.0.1 over the hostile logs root: bad query strings, unknown runs,
path traversal in run names).

    nice -n 10 .venv/bin/python scripts/adversarial_pass.py [--work DIR] [--json FILE] [--family NAME]...
        [--no-browser] [--case-timeout S] [--show N]

Each command runs in a forked child of this process (the package imported once), with a deadline; each
case is classed: clear (exit 2 with one ``aah-viz: error:`` line naming what is wrong, or exit 0 where
that is right, and nothing lost), unclear (refused, but not in one line or not naming it), silent (exit 0
where the input is damage), data loss (a file of the run gone after a refusal), traceback, hang, page
exception (a dashboard address), security (a file outside the run changed or created; decoy text shown on
a page). Prints one row per family and the cases that were not clear; ``--json`` writes every case.
Needs the dev extras and Debian's /usr/bin/chromium for the dashboard family (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from adversarial_cases import LONG, READABLE, SYNTHETIC_DAMAGE, TRAINED_DAMAGE, USERS, Case, damaged_copies  # noqa: E402
from adversarial_web import dashboard_cases  # noqa: E402

OUTCOMES = ["clear", "unclear", "silent", "data loss", "traceback", "hang", "page exception", "security"]


# ------------------------------------------------------------------------------------------ running
def _child(argv: list[str], log: str, cwd: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    from aah_viz.cli import main

    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    except BaseException:  # noqa: BLE001 - the finding: an exception out of main
        traceback.print_exc()
        code = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0) if int(code or 0) < 256 else 98)


def run_argv(argv: list[str], cwd: Path, timeout: float) -> tuple[int | None, str, float]:
    """(exit code or None on a hang, output, seconds) of ``aah-viz ARGV`` in a forked child."""
    log = Path(tempfile.mkstemp(prefix="adv-", suffix=".log")[1])
    started = time.monotonic()
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(argv, str(log), str(cwd)))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        code = None
    else:
        code = proc.exitcode
    text = log.read_text(errors="replace")
    log.unlink()
    return code, text, time.monotonic() - started


def tree_state(root: Path) -> dict[str, tuple]:
    """Every name under ``root`` with its kind, size and modification time (lstat only: FIFOs are not opened)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(Path(folder) / name)
            out[os.path.relpath(Path(folder) / name, root)] = (st.st_mode >> 12, st.st_size, st.st_mtime_ns)
    return out


def visible(run: Path) -> dict[str, int]:
    """The run's top-level names, each with its count of visible files (a table's segments): a name gone, or
    a table left empty, is data lost (a compaction renames segments, which is not)."""
    out = {}
    for entry in os.scandir(run):
        if entry.name.startswith((".", "_")):
            continue
        try:
            out[entry.name] = sum(1 for e in os.scandir(entry.path) if not e.name.startswith((".", "_")))
        except OSError:
            out[entry.name] = 1
    return out


def error_lines(text: str) -> list[str]:
    return [line for line in text.replace("\r", "\n").splitlines() if "error:" in line]


def classify(case: Case, code: int | None, text: str, outside_changed: bool, lost: list[str]) -> tuple[str, str]:
    if outside_changed:
        return "security", "a file outside the run changed or appeared"
    if code is None:
        return "hang", "no answer before the deadline"
    if "Traceback (most recent call last)" in text or code not in (0, 1, 2, 130):
        return "traceback", (text.strip().splitlines() or ["(no output)"])[-1][:300]
    if code != 0 and lost:
        return "data loss", f"gone after the refusal: {lost[:3]}"
    if code == 0:
        if case.want == "refuse":
            return "silent", "exit 0 on damaged input"
        return "clear", ""
    said = error_lines(text)
    if case.want == "accept":
        return "unclear", f"refused what it should take: {(said or [text.strip()[-200:]])[-1][:300]}"
    where = text if case.multi else (said[0] if len(said) == 1 else "")
    if not case.multi and len(said) != 1:
        return "unclear", f"{len(said)} error lines: {text.strip()[-300:]}"
    missing = [w for w in case.words if w.lower() not in where.lower()]
    if missing:
        return "unclear", f"does not name {missing}: {(said or [''])[-1][:300]}"
    return "clear", ""


# ------------------------------------------------------------------------------------------ the world
def build_world(work: Path, timeout: float) -> dict[str, Path]:
    """The runs, model folder, texts and hostile places every case uses, made by aah-viz itself."""
    from aah_viz.samples import make_synthetic_run

    places = {"work": work, "logs": work / "logs", "outside": work / "logs" / "outside"}
    base = make_synthetic_run(work / "base", n_layer=2, n_head=4, steps=30, flush_every=10)
    places["base"] = base
    text = work / "text.txt"
    text.write_text("\n".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(200)))
    places["text"] = text
    trained = work / "trained"
    argv = ["train", "--out", str(trained), "--preset", "tiny", "--steps", "2", "--n-docs", "20", "--no-progress"]
    code, out, _ = run_argv([*argv, "--threads", "1", "--checkpoint-interval", "2"], work, timeout * 3)
    if code != 0:
        raise SystemExit(f"could not train the tiny run: {out[-2000:]}")
    places["trained"] = trained
    places["folder"] = work / "a-folder"
    places["folder"].mkdir()
    places["file"] = work / "a-file"
    places["file"].write_text("a plain file\n")
    places["fifo"] = work / "a-fifo"
    os.mkfifo(places["fifo"])
    places["missing"] = work / "missing"
    (work / "dangling").symlink_to(work / "nowhere")
    places["dangling"] = work / "dangling"
    make_synthetic_run(places["logs"] / "good", n_layer=2, n_head=4, steps=30, flush_every=10)
    places["synthetic"] = damaged_copies(base, SYNTHETIC_DAMAGE, places["logs"])
    places["model_runs"] = damaged_copies(trained, TRAINED_DAMAGE, work / "trained-damaged")
    return places


# ------------------------------------------------------------------------------------------ the cases
def run_cases(p: dict) -> list[Case]:
    cases = []
    for name, run in p["synthetic"].items():
        words = SYNTHETIC_DAMAGE[name][2]
        want = "either" if name in READABLE else "refuse"
        out = p["work"] / "out" / name
        for cmd, argv, multi in [
            ("validate", ["validate", str(run)], True),
            ("compact", ["compact", str(run)], False),
            ("compact --force", ["compact", str(run), "--force"], False),
            ("export", ["export", str(run), "--table", "training", "--out", str(out / "export")], False),
            ("figure", ["figure", str(run), "--kind", "window_heatmap", "--out", str(out / "figure.svg")], False),
            (
                "export tensorboard",
                ["export", "tensorboard", str(run), "--out", str(out / "tb"), "--no-progress"],
                False,
            ),
            ("compare", ["compare", str(run), "--no-write", "--permutations", "5", "--bootstrap", "5"], False),
        ]:
            validate_want = "refuse" if cmd in ("validate", "compact") and name not in READABLE else want
            cases.append(Case("hostile runs: light commands", f"{cmd} / {name}", argv, validate_want, words, multi))
    for name, run in p["model_runs"].items():
        words = TRAINED_DAMAGE[name][2]
        text = str(p["text"])
        small = ["--no-progress", "--threads", "1"]
        for cmd, argv in [
            ("train --resume", ["train", "--out", str(run), "--resume", "--steps", "3", *small]),
            ("probe", ["probe", str(run), "--max-docs", "1", *small]),
            ("evaluate", ["evaluate", str(run), "--data", text, "--out", str(run), "--seq-len", "16", *small]),
            ("lens", ["lens", str(run), "--text", text, "--max-tokens", "16", *small]),
        ]:
            users = USERS.get(name)  # damage that only the commands using the entry must refuse
            want = "either" if name in READABLE or (users and cmd not in users) else "refuse"
            cases.append(Case("hostile runs: model commands", f"{cmd} / {name}", argv, want, words))
    return cases


def argument_cases(p: dict) -> list[Case]:
    """Wrong arguments: the ones the issues list, then hostile values of each kind on the light commands."""
    run, text, logs = str(p["base"]), str(p["text"]), str(p["folder"])
    new = str(p["work"] / "new-run")
    tiny = ["--preset", "tiny", "--steps", "1", "--n-docs", "20", "--no-progress", "--threads", "1"]
    rows = [
        (["train", "--out", new, *tiny, "--set", "block_size=1e12"], ("block_size",)),
        (["train", "--out", new, *tiny, "--set", "n_layer=nan"], ("n_layer",)),
        (["train", "--out", str(p["file"]), *tiny], (str(p["file"]),)),
        (["train", "--out", str(p["dangling"]), *tiny], ("dangling",)),
        (["dashboard", "--logs", logs, "--port", "99999"], ("--port",)),
        (["dashboard", "--logs", logs, "--port", "-1"], ("--port",)),
        (["dashboard", "--logs", logs, "--address", "999.1.1.1"], ("--address",)),
        (["dashboard", "--logs", str(p["missing"])], ("missing",)),
        (["bench", "routing", "--heads", "0"], ("--heads",)),
        (["bench", "attention", "--seq-len", "0"], ("--seq-len",)),
        (["bench", "step", "--batch", "0"], ("--batch",)),
        (["bench", "compact", "--segments", "-1"], ("--segments",)),
        (["bench", "dashboard", "--steps", "0"], ("--steps",)),
        (["bench", "retrofit", "--windows", "0"], ("--windows",)),
        (["bench", "generate", "--new-tokens", "-1"], ("--new-tokens",)),
        (["bench", "probe", "--max-docs", "0"], ("--max-docs",)),
        (["bench", "hooks", "--steps", "0"], ("--steps",)),
        (["bench", "dashboard", "--pages", "--logs", str(p["file"])], ("--logs",)),
        (["import-reference", "--out", str(p["file"])], (str(p["file"]),)),
        (["evaluate", str(p["trained"]), "--data", str(p["missing"]), "--out", new, "--no-progress"], ("missing",)),
        (["evaluate", str(p["trained"]), "--data", text, "--out", new, "--batch-size", "0"], ("--batch-size",)),
        (["profile", str(p["trained"]), "--data", text, "--out", new, "--batches", "0"], ("--batches",)),
        (["evaluate", str(p["fifo"]), "--data", text, "--out", new, "--no-progress"], ("a-fifo",)),
        (["validate", str(p["fifo"])], ("a-fifo",), True),
        (["compact", str(p["folder"])], ("a-folder",)),
        (["export", run, "--table", "training", "--out", str(p["file"])], ("a-file",)),
        (["figure", run, "--kind", "no-such-kind", "--out", str(p["work"] / "f.svg")], ("no-such-kind",)),
        (["figure", run, "--kind", "hierarchy", "--opt", "layer=1e400", "--out", str(p["work"] / "f.svg")], ("layer",)),
        (["figure", run, "--kind", "window_heatmap", "--width", "1e12", "--out", str(p["work"] / "f.svg")], ("width",)),
        (["export", run, "--table", "training", "--out", str(p["work"] / "e"), "--baseline", LONG], ("baseline",)),
        (["compare", run, "--permutations", "0"], ("--permutations",)),
        (["effects", str(p["folder"]), "--design", str(p["fifo"])], ("a-fifo",)),
        (["sweep", str(p["fifo"]), "--logs", str(p["work"] / "sweep")], ("a-fifo",)),
        (["regimes", "--json", "--no-such-option"], ("--no-such-option",)),
        (["lens", str(p["trained"]), "--docs", "0", "--no-progress"], ("--docs",)),
        (["probe", str(p["trained"]), "--max-docs", "-1", "--no-progress"], ("--max-docs",)),
        (["head-similarity", str(p["trained"]), "--blocks", "0", "--no-progress"], ("--blocks",)),
        (["conformance", str(p["fifo"])], ("a-fifo",)),
        (["import-gguf", str(p["file"]), str(p["work"] / "g")], ("a-file",)),
        (["import-gguf", str(p["missing"]), str(p["work"] / "g")], ("missing",)),
        (["frontier", str(p["folder"]), "--data", text, "--out", new, "--windows", "0"], ("--windows",)),
        (["retrofit", str(p["folder"]), "--data", text, "--out", new, "--lr", "nan"], ("--lr",)),
        (["retrofit", str(p["folder"]), "--data", text, "--out", new, "--batch-size", "0"], ("--batch-size",)),
    ]
    return [Case("arguments", " ".join(r[0][:5])[-90:], r[0], "refuse", r[1], *r[2:]) for r in rows]


# ------------------------------------------------------------------------------------------ report
def summarise(results: list[dict]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for r in results:
        row = table.setdefault(r["family"], {"cases": 0} | {k: 0 for k in OUTCOMES})
        row["cases"] += 1
        row[r["outcome"]] += 1
    return table


def print_table(table: dict[str, dict[str, int]]) -> None:
    head = ["family", "cases", *OUTCOMES]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    total = {k: 0 for k in ["cases", *OUTCOMES]}
    for family, row in table.items():
        print("| " + " | ".join([family, *(str(row[k]) for k in head[1:])]) + " |")
        for k in total:
            total[k] += row[k]
    print("| " + " | ".join(["all", *(str(total[k]) for k in head[1:])]) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", type=Path, default=None, help="an empty folder to build the world in (default: temp)")
    ap.add_argument("--json", type=Path, default=None, help="write every case's outcome here")
    ap.add_argument(
        "--family",
        action="append",
        default=None,
        help="only these families (repeatable): arguments, runs, models, dashboard",
    )
    ap.add_argument("--no-browser", action="store_true", help="leave the dashboard family out")
    ap.add_argument(
        "--case-timeout", type=float, default=60, help="seconds before a case counts as a hang (default 60)"
    )
    ap.add_argument(
        "--show", type=int, default=60, help="list at most this many cases that were not clear (default 60)"
    )
    args = ap.parse_args()
    import torch  # noqa: F401 - imported once here so every forked case starts with it loaded

    torch.set_num_threads(1)
    work = args.work or Path(tempfile.mkdtemp(prefix="adversarial-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    p = build_world(work, args.case_timeout)
    chosen = set(args.family or ["arguments", "runs", "models", "dashboard"])
    cases = (argument_cases(p) if "arguments" in chosen else []) + [
        c
        for c in run_cases(p)
        if ("runs" in chosen and "light" in c.family) or ("models" in chosen and "model" in c.family)
    ]
    results = []
    watched = [p["logs"] / "outside", work / "trained-damaged" / "outside", p["folder"]]
    for i, case in enumerate(cases, 1):
        before = [tree_state(w) for w in watched]
        run_dir = next((Path(a) for a in case.argv if Path(a).parent in (p["logs"], work / "trained-damaged")), None)
        inside = visible(run_dir) if run_dir and run_dir.is_dir() and not run_dir.is_symlink() else {}
        code, text, seconds = run_argv(case.argv, work, args.case_timeout)
        changed = [tree_state(w) for w in watched] != before
        after = visible(run_dir) if inside else {}
        lost = sorted(k for k, n in inside.items() if n and not after.get(k))
        outcome, why = classify(case, code, text, changed, lost)
        results.append(
            dict(family=case.family, case=case.name, code=code, outcome=outcome, why=why, seconds=round(seconds, 2))
        )
        print(
            f"[{i}/{len(cases)}] {outcome:10s} {case.family}: {case.name} ({seconds:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        if args.json:  # after every case: an interrupted pass keeps what it found
            args.json.write_text(json.dumps({"cases": results}, indent=1))
    if "dashboard" in chosen and not args.no_browser:
        results += dashboard_cases(p, watched, tree_state)
    table = summarise(results)
    print_table(table)
    shown = [r for r in results if r["outcome"] != "clear"][: args.show]
    if shown:
        print("\nnot clear:")
        for r in shown:
            print(f"- [{r['outcome']}] {r['family']}: {r['case']}: {r['why']}")
    print(f"\n{len(results)} cases in {time.monotonic() - started:.0f} s; world in {work}")
    if args.json:
        args.json.write_text(json.dumps({"summary": table, "cases": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
