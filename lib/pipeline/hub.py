"""Whether the Hugging Face Hub can be used, found out once and within seconds.

Unreachable, huggingface_hub and datasets retry every file five times with back-off (about 25 s a
file), so a check of the two models and three datasets of ``paper_slice`` took 2 min 41 s before it
said what was missing, and never said "no network". Stages and ``make models`` ask here first:

- with ``HF_HUB_OFFLINE`` set, the hub is not asked at all; a hub model is usable when its files
  are in the local cache (``HF_HOME``);
- otherwise one request to the hub's address, without retries, bounded by a few seconds, tells
  whether it answers; when it does not, the caller stops with one line saying what to do.
"""

from __future__ import annotations

import functools
import os

from ..errors import UserError

PROBE_SECONDS = 5.0
FALSE = ("", "0", "false", "False", "no", "off")


class HubUnreachable(UserError, RuntimeError):
    """The hub is needed and cannot be used (the message says what to do, in one line)."""


def offline() -> bool:
    """``HF_HUB_OFFLINE`` is set: hub files come from the local cache only."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in FALSE


def endpoint() -> str:
    """The hub's address (``HF_ENDPOINT``, else https://huggingface.co)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


@functools.lru_cache(maxsize=4)
def _probe(url: str, timeout: float) -> str | None:
    import requests

    try:
        requests.head(url, timeout=timeout, allow_redirects=False)
    except requests.RequestException as exc:
        known = next((k for k in ("Name or service not known", "Temporary failure in name resolution",
                                  "Connection refused", "timed out", "Network is unreachable") if k in str(exc)), None)
        return type(exc).__name__ + (f": {known}" if known else "")
    return None


def unreachable(timeout: float = PROBE_SECONDS) -> str | None:
    """None when the hub answers (any HTTP status counts: it is there); else why not, in a few words.
    Asked once per process and address."""
    return _probe(endpoint(), float(timeout))


def cached(repo_id: str) -> bool:
    """A hub model's config is in the local cache (what an offline run can load)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an id that is not a valid repo id is not cached
        return False


def fix(command: str) -> str:
    """What to do when the hub cannot be used (the tail of every one-line message here)."""
    return (f"run `{command}` where the hub can be reached, or point HF_HOME at a cache that already holds "
            "the models and datasets and set HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1")


def require(what: str, command: str, timeout: float = PROBE_SECONDS) -> None:
    """Raise :class:`HubUnreachable` (one line) when ``what`` needs the hub and it does not answer;
    nothing when it answers or ``HF_HUB_OFFLINE`` is set (then the cache is the caller's to check)."""
    if offline():
        return
    why = unreachable(timeout)
    if why:
        raise HubUnreachable(f"{what} needs the Hugging Face Hub and {endpoint()} cannot be reached from this "
                             f"machine ({why}; no network?): {fix(command)}")
