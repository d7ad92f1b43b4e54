"""Reaching the Hugging Face hub: one quick probe instead of a minute of retries.

When the hub cannot be reached, loading runs in offline mode: the local cache answers, or the load
fails at once. The data and models are the same either way; only the waiting differs.
"""

from __future__ import annotations

import os
import functools
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

PROBE_TIMEOUT_S = 3.0


@functools.cache
def reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True when the hub endpoint answers at all (any HTTP status counts); probed once a process."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(endpoint, timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


@contextmanager
def hub_access() -> Iterator[bool]:
    """Yields whether the hub is online; offline, the libraries read only the local cache."""
    import datasets.config
    import huggingface_hub.constants as hub_constants

    if hub_constants.HF_HUB_OFFLINE:
        yield False
        return
    if reachable():
        yield True
        return
    saved = hub_constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    hub_constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield False
    finally:
        hub_constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved
