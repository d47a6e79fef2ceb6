"""The light side (aah_viz and the dashboard) imports and runs without torch."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Makes torch look uninstalled: any import of it raises ModuleNotFoundError, as on a machine without it.
HIDE_TORCH = """
import sys, importlib.abc
class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == 'torch' or name.startswith('torch.'):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None
sys.meta_path.insert(0, _NoTorch())
"""

BLOCK_TORCH = (
    HIDE_TORCH
    + """
import importlib, pkgutil
import aah_viz
names = [m.name for m in pkgutil.walk_packages(aah_viz.__path__, 'aah_viz.')]
failed = []
for name in names:
    try:
        importlib.import_module(name)
    except ImportError as err:
        failed.append(f'{name}: {err}')
print(len(names))
if failed:
    print('\\n'.join(failed))
    sys.exit(1)
"""
)


def test_every_aah_viz_module_imports_without_torch():
    proc = subprocess.run([sys.executable, "-c", BLOCK_TORCH], cwd=ROOT, capture_output=True, text=True)
    assert "No module named 'torch'" not in proc.stdout, proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert int(proc.stdout.split()[0]) > 5  # the walk really found the package's modules


def test_cli_help_lists_commands_without_torch():
    code = HIDE_TORCH + "from aah_viz.cli import main; sys.exit(main(['--help']))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for command in ("train", "validate", "dashboard", "export", "bench"):
        assert command in proc.stdout


def test_torch_command_without_torch_says_how_to_install():
    code = HIDE_TORCH + (
        "from aah_viz.cli import main; sys.exit(main(['train', '--preset', 'tiny', '--regime', 'full_adaptive',"
        " '--steps', '1', '--out', '/tmp/aah-viz-no-torch-run']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pip install" in proc.stderr and "torch" in proc.stderr


def _public_instrumentation_names() -> set[str]:
    """The keys of ``instrumentation._EXPORTS``, read from the source (no import, no torch)."""
    import ast

    tree = ast.parse((ROOT / "instrumentation" / "__init__.py").read_text())
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(getattr(t, "id", None) == "_EXPORTS" for t in targets):
            return {k.value for k in node.value.keys}
    raise AssertionError("instrumentation/__init__.py defines no _EXPORTS")


def test_aah_viz_imports_only_public_instrumentation_names():
    """The light side reaches the model side only through ``from instrumentation import NAME``."""
    import ast

    public = _public_instrumentation_names()
    assert {"bench_routing", "bench_step", "bench_hooks", "bench_attention"} <= public
    offences = []
    for path in sorted((ROOT / "aah_viz").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                offences += [
                    f"{where} import {a.name}" for a in node.names if a.name.split(".")[0] == "instrumentation"
                ]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "instrumentation":
                if node.module != "instrumentation":
                    offences.append(f"{where} from {node.module} import ...")
                offences += [f"{where} {a.name} is not exported" for a in node.names if a.name not in public]
    assert not offences, "\n".join(offences)


def _parsers(parser, path=("aah-viz",)):
    """Every parser of the CLI with its command path, subcommands included."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_command_and_option_has_help_in_plain_text():
    from aah_viz.cli import build_parser

    seen = 0
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert "%%" not in text and "%(" not in text, (path, text)  # argparse leaves these literal in descriptions
        if len(path) > 1:
            assert parser.description, f"{' '.join(path)} has no description"
        for action in parser._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{' '.join(path)} {action.option_strings[0]} has no help text"
        seen += 1
    assert seen > 10
