"""The errors a user can act on, raised with one line that names the key or the file, its value
and what was expected; the command line prints that line without a traceback. Every floor of
the package raises them, so this module imports nothing.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the key, the value and why."""


class CheckpointError(OSError):
    """A checkpoint or model file could not be written, found or read; earlier ones are intact."""
