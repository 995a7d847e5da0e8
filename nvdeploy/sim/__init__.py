"""Simulated GPU nodes: scenarios and fake NVIDIA/system tools that print the real tools' byte formats.

``scenario`` describes a node (expected profile, real hardware, faults) and derives its facts; ``tools`` and
``smi_xml`` render what ``nvidia-smi``, ``lspci``, ``dmesg`` and ``journalctl`` would print on it; ``fake_tool``
is the executable entry point installed as those tools on fake SSH nodes.
"""
