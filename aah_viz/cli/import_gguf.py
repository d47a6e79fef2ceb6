"""``aah-viz import-gguf``: a GGUF model file as a Hugging Face model folder every command accepts."""

from __future__ import annotations

import sys

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_output_options


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "import-gguf",
        help="turn a GGUF model file (Llama, Mistral, Qwen2, Qwen3) into a Hugging Face model folder",
        description="Read a GGUF model file (llama.cpp's format, e.g. a quantised release), dequantise its weights "
        "to float32 and write an ordinary Hugging Face folder (config, safetensors weights, tokenizer) that evaluate, "
        "retrofit, profile, probe and frontier accept. Nothing is written to OUT_DIR unless the whole import "
        "succeeds. gguf_source.json in the folder records the file, its SHA-256 and tensor types. Needs the gguf "
        "extra: pip install 'aah-viz[gguf]'.",
    )
    p.add_argument("gguf_file", metavar="FILE.gguf", help="the GGUF model file")
    p.add_argument("out_dir", metavar="OUT_DIR", help="a new (or empty) folder for the Hugging Face model")
    add_output_options(p, "print the summary as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.torch_import import require_torch

    require_torch()
    from instrumentation import import_gguf

    summary = import_gguf(args.gguf_file, args.out_dir, progress=not args.no_progress)
    if args.json:
        print(json_text(summary, indent=2))
    else:
        types = ", ".join(f"{n} {t}" for t, n in sorted(summary["tensor_types"].items()))
        print(
            f"wrote {summary['out_dir']}: {summary['architecture']}, {summary['parameters']:,} parameters "
            f"dequantised from {types} ({summary['seconds']} s)",
            file=sys.stdout,
        )
        print(f"next: aah-viz evaluate {summary['out_dir']} --data TEXT --out RUN --regime full_attention")
    return 0
