"""`python tests/vllm_routes.py CONFIG SERVER_LOG`: the routes of vLLM's app as vf-vllm's server built it, as JSON.

Run in a fresh process because building the app has process-wide side effects: vLLM's SageMaker
bootstrap registers LoRA routes (`/adapters`) in a global registry once, so a second app built in the
same process (the full-weight server's, after the LoRA server's) came out without routes the real
server has. The app is built from the same argv (config_argv) through vLLM's own parser, the same
VLLM_* switches (server_env decides which routers vLLM attaches) and the supported tasks the server
logged; path parameters are filled with sample values.
"""

import ast
import json
import os
import re
import sys
import uuid
from pathlib import Path
from unittest import mock


def routes(config: Path, server_log: Path) -> dict:
    from starlette import convertors
    from starlette.routing import Mount, WebSocketRoute
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from vfrl.config import load_config
    from vfrl.inference.server import config_argv, server_env

    cfg = load_config(config)
    argv = config_argv(cfg)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[3:])  # after `python -m MODULE`
    tasks = re.search(r"Supported tasks: (.+)$", server_log.read_text(), re.M)
    assert tasks, f"no 'Supported tasks' line in {server_log}"
    with mock.patch.dict(os.environ, server_env({}, not cfg.args.use_lora, argv)):
        app = build_app(args, tuple(ast.literal_eval(tasks.group(1))), None)
    samples = {convertors.IntegerConvertor: 1, convertors.FloatConvertor: 1.5,
               convertors.UUIDConvertor: uuid.UUID(int=1)}
    paths, websockets = set(), set()
    for route in app.routes:
        path = route.path_format.format(**{name: conv.to_string(samples.get(type(conv), "x"))
                                           for name, conv in route.param_convertors.items()})
        if isinstance(route, Mount):  # a whole sub-application: its root and anything under it
            paths |= {path, f"{path}/x"}
        else:
            (websockets if isinstance(route, WebSocketRoute) else paths).add(path)
    return {"openapi_paths": sorted(app.openapi()["paths"]), "paths": sorted(paths), "websockets": sorted(websockets),
            "model": args.model}


if __name__ == "__main__":
    print(json.dumps(routes(Path(sys.argv[1]), Path(sys.argv[2]))))
