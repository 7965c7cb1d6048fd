"""Statements of the user docs that code can check cheaply (the docs are a contract)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from ircore import cli
from ircore.compile._fusion import FUSION_PASSES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_compiling_md_lists_each_fusion_once_in_the_order_the_pass_runs_them():
    text = (DOCS / "compiling.md").read_text()
    section = text[text.index("\n## Fusions\n") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
    assert rows == list(FUSION_PASSES)
    assert "They run in that order" in section


def test_cli_explain_says_where_its_inputs_come_from():
    """The shape is make_inputs' (the query's for the rotary ops), not an ``x`` the op may lack."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["explain", "rotary_embedding", "--shape", "4x256", "--dtype", "float32"])
    assert code == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("rotary_embedding: runs ")
    assert lines[-1] == "  (inputs: rotary_embedding.make_inputs(4x256, float32, cpu))"
