"""Transports: the only layer that reaches a node (SSH, a local subprocess, or the in-process simulator).

``base.py`` is the interface every other layer uses; ``batch.py`` is the node-side script that runs a batch of
commands in one round trip. Nothing is imported here, so a bare copy of one module (``node_paths.py``) still loads.
"""
