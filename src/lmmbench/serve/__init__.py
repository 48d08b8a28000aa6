"""The built-in OpenAI-compatible server (``lmmbench serve``) over the batching engine.

Importing this package does not import torch, fastapi or uvicorn.
"""

from lmmbench.serve.app import AppSettings, create_app
from lmmbench.serve.metrics import ServerMetrics
from lmmbench.serve.server import ServeConfig, ServerThread, build_server, serve

__all__ = ["AppSettings", "ServeConfig", "ServerMetrics", "ServerThread", "build_server", "create_app", "serve"]
