"""Simulated GPU nodes: scenarios and fake NVIDIA/system tools that print the real tools' byte formats.

``scenario`` describes a node (expected profile, real hardware, faults) and derives its facts; ``tools`` and
``smi_xml`` render what ``nvidia-smi``, ``lspci``, ``dmesg`` and ``journalctl`` would print on it; ``fake_tool``
is the executable entry point installed as those tools on fake SSH nodes.

The other tool modules register their tools, hooks and faults into ``tools`` and ``scenario`` when imported, and
those two import none of them. ``extensions`` imports them all, here, so that whichever module of the simulator a
caller imports (the CLI's ``scenario.validate_fault``, the fake tool, the transport), every tool and fault is known.
"""

from nvdeploy.sim import extensions  # noqa: F401
