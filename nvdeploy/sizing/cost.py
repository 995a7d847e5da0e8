"""Money and energy: cloud cost, GPU energy, and when owning the nodes beats renting them.

Energy counts the GPUs only (datasheet TDP, or the power a run read from the nodes) x GPU-hours: no CPUs, network,
cooling (multiply by the site's PUE and ~1.3-1.5 for the rest of the server if you need the wall figure).

On-premises: a node costs CAPEX_PER_NODE, written off over YEARS, plus its GPUs' energy at USD_PER_KWH. Per GPU-hour
used at utilisation u that is capex / (years * 8760 * gpus_per_node * u) + kW * price. Break-even utilisation is
the u at which that equals the cloud price: owning is cheaper for a fleet busier than that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nvdeploy.sizing.units import SizingError

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class OnPrem:
    capex_per_node: float
    years: float
    usd_per_kwh: float

    @classmethod
    def parse(cls, text: str) -> OnPrem:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 3:
            raise SizingError(f"--on-prem: {text!r} must be CAPEX_PER_NODE,YEARS,USD_PER_KWH (e.g. 300000,4,0.10)")
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise SizingError(f"--on-prem: {text!r} must be three numbers CAPEX_PER_NODE,YEARS,USD_PER_KWH") from None
        if values[0] < 0 or values[1] <= 0 or values[2] < 0:
            raise SizingError(f"--on-prem: {text!r}: capex and USD/kWh must be >= 0 and years > 0")
        return cls(*values)

    def usd_per_gpu_hour(self, gpus_per_node: int, watts: float, utilisation: float = 1.0) -> float:
        capital = self.capex_per_node / (self.years * HOURS_PER_YEAR * gpus_per_node * utilisation)
        return capital + watts / 1000.0 * self.usd_per_kwh

    def breakeven_utilisation(self, gpus_per_node: int, watts: float, cloud_usd: float) -> Optional[float]:
        """Utilisation above which owning is cheaper than ``cloud_usd`` per GPU-hour; None if it never is."""
        margin = cloud_usd - watts / 1000.0 * self.usd_per_kwh
        if margin <= 0:
            return None
        return self.capex_per_node / (self.years * HOURS_PER_YEAR * gpus_per_node) / margin


def cost_usd(gpu_hours: Optional[float], usd_per_gpu_hour: Optional[float]) -> Optional[float]:
    return None if gpu_hours is None or usd_per_gpu_hour is None else gpu_hours * usd_per_gpu_hour


def energy_mwh(gpu_hours: Optional[float], watts: Optional[float]) -> Optional[float]:
    return None if gpu_hours is None or watts is None else gpu_hours * watts / 1e6
