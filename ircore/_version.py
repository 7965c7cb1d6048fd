"""The core's version: one place, read by the package, the loader (providers' ranges) and the cache key."""

__version__ = "0.1.0"
