"""verifiers' `verifiers.utils.client_utils`: an OpenAI client from a `ClientConfig` (a judge's, a user
simulator's), and Prime Intellect's CLI config, which classic packages read for a key."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from vfrl.types import ClientConfig

logger = logging.getLogger(__name__)


def load_prime_config() -> dict:
    """~/.prime/config.json (the `prime` CLI's login), or {} when there is none or it cannot be read."""
    path = Path.home() / ".prime" / "config.json"
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError) as e:
        logger.warning("could not read %s: %s", path, e)
        return {}
    return data if isinstance(data, dict) else {}


def setup_openai_client(config: ClientConfig):
    """An `AsyncOpenAI` for `config`: its key from the variable it names (for PRIME_API_KEY, the prime CLI's login
    when the variable is unset, with its team header), its base URL, retries, timeouts and connection limits."""
    import httpx
    from openai import AsyncOpenAI

    headers, api_key = dict(config.extra_headers), os.getenv(config.api_key_var)
    if config.api_key_var == "PRIME_API_KEY":
        prime = load_prime_config()
        api_key = api_key or prime.get("api_key")
        if team := os.getenv("PRIME_TEAM_ID") or prime.get("team_id"):
            headers["X-Prime-Team-ID"] = team
    http_client = httpx.AsyncClient(
        headers=headers, timeout=httpx.Timeout(config.timeout, connect=config.connect_timeout),
        limits=httpx.Limits(max_connections=config.max_connections,
                            max_keepalive_connections=config.max_keepalive_connections))
    return AsyncOpenAI(api_key=api_key or "EMPTY", base_url=config.api_base_url, max_retries=config.max_retries,
                       http_client=http_client)
