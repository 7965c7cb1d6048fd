"""The ``ircore`` command's longer-running tools: ``verify`` (conformance on this machine) and
``bench`` (measure providers, write the fastest order). ``ircore.cli`` only wires them."""
