"""Helpers for checking implementations against an op's semantics (the conformance kit's base)."""

from ircore.testing._compare import assert_close_to_reference

__all__ = ["assert_close_to_reference"]
