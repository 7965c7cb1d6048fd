"""Helpers for provider authors: check implementations against an op's semantics.

``assert_close_to_reference(op, out, args)`` checks one output; ``check_provider(name, device=...)``
is the conformance kit: every implementation of a provider, on every sample input it accepts.
``iter_cases``/``run_case`` expose the kit one case at a time (``ircore verify`` and the pytest
plugin, ``pytest --ircore-provider NAME``, are built on them); ``simulated_platform(kind=...)``
runs providers as if on another platform (stand-in tests); ``beyond_fp32_rows(hidden, ...)``
gives inputs for the norms' fp32-overflow rule at any width, for a kernel's own tests, and
``fp8_edge_rows(hidden, ...)`` the fp8 quant ops' edge rows (zero rows and groups, past the fp8
maximum, inf, subnormals);
``pdl_problems(ptx)`` finds kernels that would race under programmatic dependent launch, and
``assert_pdl_chain_matches(chain, inputs, set_pdl)`` checks dependent calls on the GPU;
``isolated()`` gives a test a scratch copy of ircore's state (ops, implementations, priorities,
configuration, providers), undone on exit; ``install_standins`` and ``simulated_active`` test an
adapter against stand-ins of a vendor library, as on its platform; ``compiled_code(fn, args)``
compiles ``fn`` with the ``ircore`` backend and returns its outputs and the generated code (which
ops the graph calls).
"""

from ircore.testing._compare import Comparison, assert_close_to_reference, compare_to_reference
from ircore.testing._compiled import compiled_code, copied_buffers
from ircore.testing._conformance import (
    Case,
    CaseResult,
    ConformanceReport,
    check_provider,
    iter_cases,
    run_case,
)
from ircore.testing._inputs import beyond_fp32_rows, fp8_edge_rows
from ircore.testing._isolated import isolated
from ircore.testing._pdl import assert_pdl_chain_matches, pdl_problems
from ircore.testing._platform import simulated_platform
from ircore.testing._standins import install_standins, simulated_active

__all__ = [
    "Case",
    "CaseResult",
    "Comparison",
    "ConformanceReport",
    "assert_close_to_reference",
    "assert_pdl_chain_matches",
    "beyond_fp32_rows",
    "check_provider",
    "compare_to_reference",
    "compiled_code",
    "copied_buffers",
    "fp8_edge_rows",
    "isolated",
    "install_standins",
    "iter_cases",
    "pdl_problems",
    "run_case",
    "simulated_active",
    "simulated_platform",
]
