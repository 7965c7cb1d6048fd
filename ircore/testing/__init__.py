"""Helpers for provider authors: check implementations against an op's semantics.

``assert_close_to_reference(op, out, args)`` checks one output; ``check_provider(name, device=...)``
is the conformance kit: every implementation of a provider, on every sample input it accepts;
``simulated_platform(kind=...)`` runs providers as if on another platform (stand-in tests).
"""

from ircore.testing._compare import assert_close_to_reference
from ircore.testing._conformance import ConformanceReport, check_provider
from ircore.testing._platform import simulated_platform

__all__ = ["ConformanceReport", "assert_close_to_reference", "check_provider", "simulated_platform"]
