"""diversed-bench: a reference harness for relaxed speculative decoding."""

__version__ = "0.1.0"
