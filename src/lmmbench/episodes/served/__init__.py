"""Policies over openpi's websocket protocol: the msgpack-numpy codec (``codec``) and ``lmmbench serve-policy``'s
server with cross-connection batching (``server``); the driver side is ``episodes.policies.remote``."""
