"""Collect: the commands that gather raw evidence from a node, each a ``Collector`` with its own timeout.

``collector`` is the type; ``catalog`` assembles every collector by name and turns a plan into command specs;
``datacenter`` (NVLink, fabric, InfiniBand, DCGM, nccl-tests), ``stack`` (CUDA, containers, MPS, IMEX) and the
``*_commands`` modules (their command lines) fill it; ``probe/`` is the NVML probe shipped to the node. Collectors
describe commands; a transport runs them. This stage imports the config, the transport interface and nothing later.
"""

from nvdeploy._moved import forward_names

# Names of the old flat nvdeploy/collect.py (now collect/catalog.py) keep working, with a DeprecationWarning.
__getattr__ = forward_names("nvdeploy.collect", "nvdeploy.collect.catalog")
