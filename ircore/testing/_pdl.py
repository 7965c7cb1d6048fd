"""Checks for kernels launched with programmatic dependent launch (PDL, sm_90+).

Why: a kernel launched with the PDL attribute may start while its predecessor in the stream is
still running; it is correct only if ``griddepcontrol.wait`` comes before its first global memory
access. Nothing fails loudly when the wait is missing or misplaced (results are merely racy), so
providers check their compiled PTX (:func:`pdl_problems`, any machine that can compile for
sm_90) and, on the GPU, that dependent calls give the same bits with PDL on and off
(:func:`assert_pdl_chain_matches`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_GLOBAL_ACCESS = re.compile(r"\b(?:ld|st|atom|red)\.global\b")


def pdl_problems(ptx: str) -> dict[str, str]:
    """Each kernel (``.entry``) in ``ptx`` that is not PDL-safe, with what is wrong.

    PDL-safe: ``griddepcontrol.wait`` before the first global load, store or atomic, and a
    ``griddepcontrol.launch_dependents`` (else the next kernel cannot start early, and PDL buys
    nothing). An empty dict means every kernel is safe; ``ValueError`` if ``ptx`` has no kernels.
    """
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(ptx)]
    if not starts:
        raise ValueError("no .entry (kernel) in this PTX")
    problems: dict[str, str] = {}
    for i, (start, name) in enumerate(starts):
        body = ptx[start : starts[i + 1][0] if i + 1 < len(starts) else len(ptx)]
        wait = body.find("griddepcontrol.wait")
        access = _GLOBAL_ACCESS.search(body)
        if wait < 0:
            problems[name] = "no griddepcontrol.wait"
        elif access is not None and access.start() < wait:
            problems[name] = f"{access.group(0)} before griddepcontrol.wait"
        elif "griddepcontrol.launch_dependents" not in body:
            problems[name] = "no griddepcontrol.launch_dependents"
    return problems


def assert_pdl_chain_matches(
    chain: Callable[..., Sequence[Any]],
    inputs: Sequence[Any],
    set_pdl: Callable[[bool | None], Any],
) -> None:
    """Run ``chain(*inputs)`` four ways and assert the results are equal bit for bit: eagerly and
    replayed from a CUDA graph, with PDL off and on.

    ``chain`` should be calls that each read what the previous one wrote (a kernel that touched
    memory before its predecessor finished would change the result) and return the tensors to
    compare; it runs on fresh copies of ``inputs`` each time, so it may write into them.
    ``set_pdl(False | True)`` switches your provider's PDL; ``set_pdl(None)`` (called at the end,
    also on failure) restores its default. Needs a CUDA GPU.
    """
    import torch

    results: dict[str, list[Any]] = {}
    try:
        for pdl in (False, True):
            set_pdl(pdl)
            work = [t.clone() for t in inputs]
            results[f"eager, PDL {'on' if pdl else 'off'}"] = [t.clone() for t in chain(*work)]
            for w, t in zip(work, inputs):
                w.copy_(t)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outs = chain(*work)
            for w, t in zip(work, inputs):
                w.copy_(t)
            graph.replay()
            torch.cuda.synchronize()
            results[f"CUDA graph, PDL {'on' if pdl else 'off'}"] = [t.clone() for t in outs]
    finally:
        set_pdl(None)
    (base_name, base), *others = results.items()
    for name, outs in others:
        for i, (a, b) in enumerate(zip(base, outs)):
            if not torch.equal(a, b):
                diff = (a.double() - b.double()).abs().max().item()
                raise AssertionError(f"output {i}: {name} differs from {base_name} (max abs diff {diff:g})")
