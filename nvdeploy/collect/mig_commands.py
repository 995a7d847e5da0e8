"""The two collectors gpu.mig adds to the light batch where a MIG layout is named: the GPU and compute instances.

``nvidia-smi mig -lgi`` and ``nvidia-smi mig -lci`` (20 s each), planned only for a host whose ``mig_config``
names a layout (the check compares them with it); elsewhere they are not run at all and the light batch stays as
it was. Listing needs no root where the driver's MIG monitor capability is readable (the default); with ``sudo``
they run as root, as NVIDIA's MIG User Guide examples do. Where no GPU has MIG on, nvidia-smi prints one line
("No MIG-enabled devices found.", "No GPU instances found: Not Found") and exits non-zero: that line is the fact.
"""

from __future__ import annotations

from typing import Any, Mapping

from nvdeploy.collect.collector import Collector

MIG_LGI = "mig_lgi"
MIG_LCI = "mig_lci"
LGI_ARGV = ("nvidia-smi", "mig", "-lgi")
LCI_ARGV = ("nvidia-smi", "mig", "-lci")


def _when_layout(argv: tuple[str, ...]) -> Any:
    def build(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
        return argv if host_vars.get("mig_config") else ()

    return build


LGI = Collector(MIG_LGI, LGI_ARGV, 20.0, needs_root=True, build=_when_layout(LGI_ARGV),
                description="MIG GPU instances per GPU (nvidia-smi mig -lgi), where a MIG layout is named")
LCI = Collector(MIG_LCI, LCI_ARGV, 20.0, needs_root=True, build=_when_layout(LCI_ARGV),
                description="MIG compute instances per GPU (nvidia-smi mig -lci), where a MIG layout is named")

# This module's part of the catalog, in the order `nvdeploy/collect/catalog.py` lists it.
COLLECTORS: tuple[Collector, ...] = (LGI, LCI)
