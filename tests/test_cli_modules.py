"""The command line and missing modules: an optional extra that is not installed is one line saying how to
install it; a module of the project that cannot be imported fails loudly, never a quietly missing command."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from aah_viz.cli import BENCHES, COMMANDS
from aah_viz.torch_import import EXTRAS

ROOT = Path(__file__).resolve().parents[1]

# Runs the command line with the modules named in argv[1] (comma-separated, with their submodules)
# made unimportable, as on a machine where they are not installed or were renamed away.
HIDING_MAIN = """
import sys, importlib.abc
HIDDEN = sys.argv[1].split(",")
class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in HIDDEN):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None
sys.meta_path.insert(0, _Hide())
from aah_viz.cli import main
sys.exit(main(sys.argv[2:]))
"""


def aah_viz_without(hidden: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", HIDING_MAIN, hidden, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_a_command_module_that_cannot_be_imported_fails_the_command_line_instead_of_vanishing():
    proc = aah_viz_without("aah_viz.cli.export", "--help")
    assert proc.returncode not in (0, 2), proc.stdout
    assert "No module named 'aah_viz.cli.export'" in proc.stderr and "Traceback" in proc.stderr


def test_a_missing_project_module_inside_a_command_is_a_traceback_not_an_install_hint():
    proc = aah_viz_without("instrumentation.config", "regimes")
    assert proc.returncode not in (0, 2)
    assert "No module named 'instrumentation.config'" in proc.stderr and "Traceback" in proc.stderr
    assert "pip install" not in proc.stderr


def test_a_command_without_its_optional_extra_says_in_one_line_how_to_install_it():
    pytest.importorskip("torch")  # the command reaches for transformers after torch
    proc = aah_viz_without("transformers", "bench", "retrofit", "--json")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "aah-viz: error: this command needs transformers, which is not installed; "
        "install it with: pip install 'aah-viz[hf]'"
    ]


def test_each_optional_dependency_is_named_with_the_extra_that_installs_it():
    text = (ROOT / "pyproject.toml").read_text()
    section = text[text.index("[project.optional-dependencies]") :].split("\n[", 1)[0]
    extras = dict(line.split(" = ", 1) for line in section.splitlines() if " = [" in line)  # one line each
    for module, extra in EXTRAS.items():
        requirements = re.findall(r'"([A-Za-z0-9_.-]+)', extras[extra])
        assert module in requirements, (module, extra, extras[extra])


def test_every_module_of_the_cli_package_is_a_registered_command():
    modules = {p.stem for p in (ROOT / "aah_viz" / "cli").glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(COMMANDS) | {f"bench_{name}" for name in BENCHES}
