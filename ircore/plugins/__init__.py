"""Providers: the contract (hookspecs), discovery, loading, states and configuration."""
