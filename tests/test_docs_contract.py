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


def test_the_readme_ops_table_and_the_guide_name_every_op_ircore_declares():
    import ircore.ops

    declared = sorted(ircore.ops.__all__)
    readme = (DOCS.parent / "README.md").read_text()
    table = readme[readme.index("\n## Ops\n") : readme.index("**Batch-invariant mode**")]
    named = set(re.findall(r"`([a-z0-9_]+)(?:\(|`)", table))
    assert set(declared) <= named, sorted(set(declared) - named)
    guide = (DOCS / "writing-a-provider.md").read_text()
    listed = re.search(r"registers unknown op 'rms_nrom'; known ops: \[(.*?)\]", guide)
    assert listed is not None
    assert re.findall(r"'(\w+)'", listed.group(1)) == declared


def test_ops_md_names_the_ops_that_declare_cache_by_signature():
    import ircore
    import ircore.ops

    text = " ".join((DOCS / "ops.md").read_text().split())
    sentence = text[text.index("Of `ircore.ops`, the") : text.index("declare it;")]
    named = set(re.findall(r"`(\w+)`", sentence)) - {"ircore"}
    assert named == {name for name in ircore.ops.__all__ if ircore.get_op(name).cache_by_signature}


def test_providers_md_cuda_graph_recipe_names_real_ops_and_puts_triton_first_for_the_rest():
    """The recipe is one ``*`` entry plus the ops that keep vllm_c first: a renamed op would be
    an error at load time for the deployments that copied it."""
    import ircore.ops
    from ircore.config import read_environment

    text = (DOCS / "providers.md").read_text()
    q = re.search(r"^Q=(\S+)$", text, flags=re.M)
    recipe = re.search(r'^export IRCORE_PRIORITY="([^"]+)"$', text, flags=re.M)
    assert q is not None and recipe is not None
    priority = read_environment({"IRCORE_PRIORITY": recipe.group(1).replace("$Q", q.group(1))}).values[
        "priority"
    ]
    assert priority.pop("*") == ("triton", "vllm_c")
    assert set(priority) <= set(ircore.ops.__all__)
    assert set(priority.values()) == {("vllm_c", "triton")}
