"""Static figure export: real files through Kaleido and Chromium, and one clear error without a browser."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import waiting

from aah_viz.cli import main
from aah_viz.errors import MissingDependencyError
from aah_viz.export import collect_runs
from aah_viz.export.static import figures_bytes, find_browser, write_figure
from aah_viz.figures import FIGURE_KINDS
from aah_viz.runlog.paths import is_run
from aah_viz.samples import make_synthetic_run

MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-"}
needs_browser = pytest.mark.skipif(
    not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))
    and not os.environ.get("BROWSER_PATH"),
    reason="no Chromium-family browser here (apt-get install chromium)",
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_synthetic_run(
        tmp_path_factory.mktemp("fig") / "run",
        n_layer=2,
        n_head=6,
        steps=30,
        windows=(8, 16, 32, 64),
        seq_len=64,
        warmup=5,
    )


def _is_svg(data: bytes) -> bool:
    head = data.lstrip()[:200]
    return head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in data[:1000])


@needs_browser
def test_dashboard_figure_to_png_svg_pdf(run_dir, tmp_path):
    fig = FIGURE_KINDS["window_heatmap"](collect_runs([run_dir]))
    png, svg, pdf = figures_bytes([(fig, "png"), (fig, "svg"), (fig, "pdf")])
    assert png.startswith(MAGIC["png"]) and len(png) > 1000
    assert _is_svg(svg) and b"</svg>" in svg[-200:]
    assert pdf.startswith(MAGIC["pdf"]) and b"%%EOF" in pdf[-64:]
    # the heatmap's title is in the vector output: it is this figure, not a blank page
    assert fig.layout.title.text.split(":")[0].encode() in svg
    # the PDF's document title (what a viewer names it) is the figure's title, not "Kaleido-fier"
    pypdf = pytest.importorskip("pypdf")
    import io

    reader = pypdf.PdfReader(io.BytesIO(pdf), strict=True)
    assert reader.metadata.title == fig.layout.title.text and len(reader.pages) == 1
    assert b"Kaleido-fier" not in pdf  # not even in the Info object the update supersedes


def test_a_pdf_title_goes_in_as_an_incremental_update_any_reader_follows():
    """The original bytes stay; pypdf (strict) reads the new title, markup-free, in any script."""
    pypdf = pytest.importorskip("pypdf")
    import io

    from aah_viz.export.pdf_info import plain_title, with_title

    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=100)
    writer.add_metadata({"/Title": "Kaleido-fier"})
    buf = io.BytesIO()
    writer.write(buf)
    original = buf.getvalue()
    title = plain_title("loss <b>against</b> step<br>grouped: ü (n=2)")
    assert title == "loss against step grouped: ü (n=2)"
    titled = with_title(original, title)
    # every original byte where it was, the old title string blanked in place (no "Kaleido-fier" left anywhere)
    kept = original.rstrip(b"\n")
    start = kept.index(b"/Title (") + len(b"/Title (")
    end = kept.index(b")", start)  # pypdf writes the old title as (Kaleido\055fier)
    assert b"Kaleido" in kept[start:end]
    assert titled[:start] == kept[:start] and titled[end : len(kept)] == kept[end:]
    assert titled[start:end] == b" " * (end - start) and b"Kaleido" not in titled
    reader = pypdf.PdfReader(io.BytesIO(titled), strict=True)
    assert reader.metadata.title == title and len(reader.pages) == 1
    assert with_title(b"%PDF-1.7 no classic trailer", title) == b"%PDF-1.7 no classic trailer"


def _legend_box(svg: bytes) -> tuple[float, float, float, float, float, float]:
    """(figure width, height, legend left, right, top, bottom) of an SVG Plotly wrote."""
    text = svg.decode()
    width = float(re.search(r'<svg[^>]*width="([\d.]+)"', text).group(1))
    height = float(re.search(r'<svg[^>]*height="([\d.]+)"', text).group(1))
    at = re.search(r'<g class="legend"[^>]*transform="translate\(([-\d.]+),\s*([-\d.]+)\)"', text)
    x, y = map(float, at.groups())
    rect = re.search(r'<rect class="bg"[^>]*>', text[at.start() :]).group(0)
    w = float(re.search(r'width="([\d.]+)"', rect).group(1))
    h = float(re.search(r'height="([\d.]+)"', rect).group(1))
    return width, height, x, x + w, y, y + h


@needs_browser
@pytest.mark.parametrize("kind", ["training_curves", "coverage_over_training"])
def test_exported_legends_stay_inside_the_figure(kind):
    """The bundled runs' names: a legend laid out in a row for the dashboard ran off the file's width."""
    names = ("full_adaptive_seed0", "full_attention_seed0", "grouping_off_seed0", "deep_practical_reuse_seed1")
    dirs = [Path(__file__).resolve().parents[1] / "sample_logs" / n for n in names]
    fig = FIGURE_KINDS[kind](collect_runs(dirs))
    (svg,) = figures_bytes([(fig, "svg")])
    width, height, left, right, top, bottom = _legend_box(svg)
    assert 0 <= left and right <= width and 0 <= top and bottom <= height, (width, height, left, right, top, bottom)
    assert fig.layout.legend.orientation == "h"  # the dashboard's own figure is left as it was


@needs_browser
def test_one_browser_serves_every_export_of_a_process(run_dir):
    from aah_viz.export import static

    fig = FIGURE_KINDS["window_heatmap"](collect_runs([run_dir]))
    figures_bytes([(fig, "png")])
    renderer = static._RENDERERS[find_browser()]
    png, pdf = figures_bytes([(fig, "png"), (fig, "pdf")])
    assert png.startswith(MAGIC["png"]) and pdf.startswith(MAGIC["pdf"])
    assert static._RENDERERS[find_browser()] is renderer  # not a browser started per figure


@needs_browser
def test_cli_figure_writes_the_file(run_dir, tmp_path):
    out = tmp_path / "sub" / "branch.pdf"
    assert main(["figure", str(run_dir), "--kind", "branch_bars", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(MAGIC["pdf"])
    assert not list(out.parent.glob(".*.tmp"))


def test_cli_figure_rejects_unknown_kind_and_option(run_dir, tmp_path, capsys):
    assert main(["figure", str(run_dir), "--kind", "nope", "--out", str(tmp_path / "x.png")]) == 2
    assert "unknown figure kind 'nope'" in capsys.readouterr().err
    assert (
        main(["figure", str(run_dir), "--kind", "hierarchy", "--opt", "colour=red", "--out", str(tmp_path / "x.png")])
        == 2
    )
    assert "takes no option(s) ['colour']" in capsys.readouterr().err


@pytest.mark.parametrize(
    "opt, said",
    [
        ("layer=9", "--opt layer=9: run run has layers 0-1 (2 in all)"),
        ("layer=-1", "--opt layer=-1: run run has layers 0-1"),
        ("layer=two", "--opt layer=two must be a whole number"),
        ("head=6", "--opt head=6: run run has heads 0-5 (6 in all)"),
        ("step=31", "--opt step=31: the runs have steps 0-29"),
    ],
)
def test_cli_figure_refuses_an_option_the_run_cannot_have(run_dir, tmp_path, capsys, opt, said):
    out = tmp_path / "x.svg"
    assert main(["figure", str(run_dir), "--kind", "hierarchy", "--opt", opt, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "opt, said",
    [
        ("x=epoch", "x must be one of step, tokens, wall_s, got 'epoch'"),
        ("band=iqr", "band must be one of minmax, std, stderr, ci95, none"),
        ("group=colour", "no run has the manifest field 'colour' to group by"),
        ("scalar=accuracy", "no run here logged the scalar 'accuracy'; logged: "),
        ("log_y=maybe", "--opt log_y=maybe must be true or false"),
    ],
)
def test_cli_curves_refuses_a_choice_the_training_page_does_not_have(run_dir, tmp_path, capsys, opt, said):
    out = tmp_path / "x.svg"
    assert main(["figure", str(run_dir), "--kind", "curves", "--opt", opt, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not out.exists()


def test_figure_options_come_back_as_the_builders_take_them(run_dir):
    from aah_viz.figures.options import check_options

    runs = collect_runs([run_dir])
    assert check_options(runs, {"layer": 1, "step": "10", "head": 5.0}) == {"layer": 1, "step": 10, "head": 5}
    assert check_options(runs, {"log_step": "True", "smoothing": 0.5}) == {"log_step": True, "smoothing": 0.5}


def test_no_browser_gives_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no chromium on PATH
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    with pytest.raises(MissingDependencyError, match="apt-get install chromium"):
        find_browser()
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "missing-chrome"))
    with pytest.raises(MissingDependencyError, match="BROWSER_PATH=.*missing-chrome.*is not an executable"):
        write_figure(object(), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_no_browser_cli_exits_2_with_one_line(run_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "BROWSER_PATH"}
    env["PATH"] = str(tmp_path)  # hides /usr/bin/chromium; python is called by its absolute path
    proc = waiting.run(
        [
            sys.executable,
            "-m",
            "aah_viz",
            "figure",
            str(run_dir),
            "--kind",
            "window_heatmap",
            "--out",
            str(tmp_path / "f.png"),
        ],
        "aah-viz figure without a browser",
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("aah-viz: error:") and "apt-get install chromium" in lines[0]
    assert not (tmp_path / "f.png").exists()


def test_exported_training_curves_keep_the_first_losses_off_the_loss_and_perplexity_axes():
    """As on the Training page (issue 42): the first losses (about 115 nats; perplexity 10^50) do not set
    the exported figure's loss and perplexity axes, which span the rest of training."""
    from aah_viz.runlog import load_run

    names = ("full_adaptive_seed0", "full_attention_seed0")
    dirs = [Path(__file__).resolve().parents[1] / "sample_logs" / n for n in names]
    if not all(is_run(d) for d in dirs):
        pytest.skip("the bundled sample logs are not in this checkout")
    losses = np.concatenate([load_run(d).scalar("loss")["value"].to_numpy() for d in dirs])
    fig = FIGURE_KINDS["training_curves"](collect_runs(dirs))
    lo, hi = fig.layout.yaxis.range
    assert losses.max() > 100 and hi < losses.max() / 5, (hi, losses.max())
    assert lo <= np.quantile(losses, 0.05) and hi >= np.quantile(losses, 0.75)  # three quarters of the values are on it
    plo, phi = fig.layout.yaxis2.range  # perplexity on a log axis: the range is in log10
    assert phi < 10 and phi >= np.log10(np.exp(np.quantile(losses, 0.75)))
    whole = FIGURE_KINDS["training_curves"](collect_runs(dirs), robust="false")
    assert whole.layout.yaxis.range is None  # asked for, every value sets the axis
