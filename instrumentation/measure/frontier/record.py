"""The frontier's run directory (``FrontierRun``): a new one with its manifest, or a second call's continuation
(the same settings, further regimes and sink tokens recorded), and each result written as it comes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from aah_viz.errors import RunLogError
from aah_viz.runlog.paths import is_run
from instrumentation.measure.frontier.plan import FrontierConfig, plan

MANIFEST_KEY = "frontier"
GROWABLE = {"regimes", "sink_tokens", "retrieval", "adapt_seeds"}  # settings a second call may add to


class FrontierRun:
    """The frontier's run directory: manifest, events written as they come, what is already done."""

    def __init__(self, fc: FrontierConfig, n_layer: int, n_head: int, settings: dict):
        from aah_viz.runlog import RunWriter, load_run, make_manifest

        out = Path(fc.out)
        self.done: set[str] = set()
        self.retrieved: set[str] = set()  # configurations with their passkey check written
        self.retrieval = int(fc.retrieval)
        self.regimes: tuple[str, ...] = tuple(fc.regimes)
        self.sink_tokens: tuple[int, ...] = tuple(sorted({int(k) for k in fc.sink_tokens}))
        self.adapt_seeds: tuple[int, ...] = fc.extra_seeds()
        if is_run(out) and not fc.overwrite:
            run = load_run(out)
            recorded = run.manifest.get(MANIFEST_KEY)
            if not isinstance(recorded, dict) or recorded.get("settings") is None:
                raise RunLogError(f"{out} holds a run that is not a frontier; give a new --out or --overwrite")
            keys = (set(settings) | set(recorded["settings"])) - {
                "regimes",
                "sink_tokens",
                "retrieval",
                "adapt_seeds",
            }  # may be added
            differ = sorted(k for k in keys if recorded["settings"].get(k) != settings.get(k))
            if differ:
                raise RunLogError(
                    f"{out} is a frontier with other settings ({', '.join(differ)}); continue it with the same "
                    "settings, or give a new --out (or --overwrite)"
                )
            had_retrieval = int(recorded["settings"].get("retrieval") or 0)
            if had_retrieval and self.retrieval and had_retrieval != self.retrieval:
                raise RunLogError(
                    f"{out} asked {had_retrieval} passkey questions per depth; continue with --retrieval "
                    f"{had_retrieval} (or leave it out), so every configuration answers the same questions"
                )
            self.retrieval = had_retrieval or self.retrieval
            had = tuple(recorded["settings"].get("regimes") or ())
            self.regimes = had + tuple(r for r in fc.regimes if r not in had)
            had_sinks = tuple(recorded["settings"].get("sink_tokens") or ())
            self.sink_tokens = tuple(sorted(set(had_sinks) | set(self.sink_tokens)))
            had_seeds = tuple(recorded["settings"].get("adapt_seeds") or ())
            self.adapt_seeds = tuple(sorted(set(had_seeds) | set(self.adapt_seeds)))
            events = pd.concat([run.events("inference"), run.events("profile")])
            for detail in events["detail"] if len(events) else []:
                d = json.loads(detail) if isinstance(detail, str) else detail
                if d.get("configuration"):
                    self.done.add(d["configuration"])
            self.retrieved = {d["configuration"] for d in _details(run.events("retrieval")) if d.get("configuration")}
            self.writer = RunWriter.resume(out, keep_through_step=None)
            grew = self.regimes != had or self.sink_tokens != had_sinks or self.adapt_seeds != had_seeds
            if grew or self.retrieval != had_retrieval:
                grown = replace(fc, regimes=self.regimes, sink_tokens=self.sink_tokens, adapt_seeds=self.adapt_seeds)
                grown_settings = {**recorded["settings"], "regimes": list(self.regimes)}
                if self.sink_tokens:
                    grown_settings["sink_tokens"] = list(self.sink_tokens)
                if self.retrieval:
                    grown_settings["retrieval"] = self.retrieval
                if self.adapt_seeds:
                    grown_settings["adapt_seeds"] = list(self.adapt_seeds)
                self.writer.update_manifest(
                    **{MANIFEST_KEY: {"settings": grown_settings, "configurations": [c.name for c in plan(grown)]}}
                )
        else:
            manifest = make_manifest(
                run_id=out.name,
                regime="frontier",
                seed=fc.seed,
                config={"model_dir": settings["model_dir"], "kind": "frontier"},
                windows=list(fc.candidate_windows()),
                seq_len=int(fc.seq_len),
                n_layer=n_layer,
                n_head=n_head,
                max_depth=1,
                steps=None,
                data={"source": str(fc.data), "sha256": settings["data_sha256"]},
                base_model=settings["model_dir"],
                **{MANIFEST_KEY: {"settings": settings, "configurations": [c.name for c in plan(fc)]}},
            )
            self.writer = RunWriter.create(out, manifest, overwrite=fc.overwrite)

    def write(self, kind: str, detail: dict, tables: dict | None = None) -> None:
        for table, rows in (tables or {}).items():
            self.writer.append(table, rows)
        self.writer.event(0, kind, **detail)
        self.writer.flush()
        if detail.get("configuration"):
            (self.retrieved if kind == "retrieval" else self.done).add(detail["configuration"])

    def close(self, status: str) -> None:
        self.writer.close(status)


def _details(events: pd.DataFrame) -> list[dict]:
    if events is None or not len(events):
        return []
    return [json.loads(d) if isinstance(d, str) else d for d in events["detail"]]
