"""PTX checks for kernels launched with programmatic dependent launch (PDL, sm_90+).

Why: a kernel launched with the PDL attribute may start while its predecessor in the stream is
still running; it is correct only if ``griddepcontrol.wait`` comes before its first global memory
access. Nothing fails loudly when the wait is missing or misplaced (results are merely racy), so
providers check their compiled PTX instead, on any machine that can compile for sm_90.
"""

from __future__ import annotations

import re

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
