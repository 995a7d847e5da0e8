"""nvdeploy: take NVIDIA GPU clusters from bare metal to a signed-off, production-ready state."""

__version__ = "0.1.0"
