"""Where the vLLM server's own endpoints are, given the OpenAI base URL that requests use."""


def server_root(base_url: str) -> str:
    """The server's own endpoints (/health, /tokenize, /pause, /v1/load_lora_adapter) hang off the root of
    the OpenAI base URL (http://host:port/v1)."""
    return str(base_url).rstrip("/").removesuffix("/v1")


def client_host(host: str) -> str:
    """The address a client on this machine dials for a server bound to `host` (a wildcard bind -> loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def route_path(scope: dict) -> str:
    """The path an ASGI request names on the server, without the `--root-path` vLLM may serve under."""
    return scope.get("path", "").removeprefix(scope.get("root_path", ""))
