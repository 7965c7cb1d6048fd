"""Clients of ircore: libraries whose models are routed to ircore's ops.

``ircore.integrations.transformers``: Hugging Face transformers (``pip install ircore[transformers]``).
Nothing here is imported by ``import ircore``.
"""
