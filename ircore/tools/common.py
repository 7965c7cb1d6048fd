"""What the ``ircore`` command and its tools share: exit codes, argument types, tables."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch

from ircore import dispatch
from ircore.errors import IrcoreError
from ircore.op import IrOp, all_ops

__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "parse_dtype", "parse_shape", "select_ops", "table"]

#: 0 fine; 1 a problem found (``doctor``, ``verify``); 2 bad usage or bad configuration.
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def table(rows: list[list[str]], header: list[str]) -> str:
    """Aligned columns, indented by two spaces."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]
    )


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(p) for p in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected sizes like 16x4096") from None
    if not shape or any(s < 0 for s in shape):
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected sizes like 16x4096")
    return shape


def parse_dtype(text: str) -> torch.dtype:
    aliases = {
        "fp32": "float32",
        "fp16": "float16",
        "bf16": "bfloat16",
        "half": "float16",
        "float": "float32",
    }
    dtype = getattr(torch, aliases.get(text, text), None)
    # the dtypes the ops declare tolerances for (float64 has none: verify would fail every case)
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise argparse.ArgumentTypeError(f"--dtype {text!r}: expected float32, float16 or bfloat16")
    return dtype


def select_ops(names: Sequence[str] | None) -> list[IrOp[..., Any]]:
    """The ops named on the command line (every op when none is), by name; op libraries are
    loaded first, so their ops count. An unknown name is a usage error listing the known ones."""
    dispatch.ensure_loaded()
    ops = all_ops()
    for name in names or ():
        if name not in ops:
            raise IrcoreError(f"unknown op {name!r}; known ops: {sorted(ops)}")
    return [ops[n] for n in (names or sorted(ops))]
