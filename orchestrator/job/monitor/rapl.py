"""The RAPL sampler: the CPU packages' energy counters, read from Linux's powercap tree.

Intel CPUs since Sandy Bridge, and AMD's since Zen (Linux 5.8), count the energy each package
draws in a register the kernel shows as `/sys/class/powercap/intel-rapl:<n>/energy_uj` (the zone
whose `name` is `package-<n>`; its subzones `intel-rapl:<n>:<m>` are the cores, uncore and DRAM
inside it, and `intel-rapl-mmio:<n>` is the same package again through another interface, so
neither is added). The counter wraps at `max_energy_range_uj`; each sample carries it, and
job/energy.py unwraps the counters and reads them at the window's ends, as it does NVML's.

What it measures is the whole package: every process on the node, not the trainer alone; the
metric's description says so. Since Linux 5.10 (CVE-2020-8694, the PLATYPUS power side channel)
`energy_uj` is readable by root only unless the site relaxes it; where no package zone exists
(a VM, an ARM node) or none can be read, the sampler stands aside with the reason, and the run's
`monitor` entry says why its CPU energy is n/a.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Union

from orchestrator.job.monitor.sampler import SamplerUnavailable

#: Where Linux shows the powercap zones.
POWERCAP = Path("/sys/class/powercap")
#: A package zone's folder: intel-rapl:<n>, not a subzone (intel-rapl:<n>:<m>) nor the MMIO twin.
PACKAGE_ZONE = re.compile(r"intel-rapl:\d+")


def package_zones(root: Path) -> list[Path]:
    """The package zones under a powercap tree, in package order (their `name` is package-<n>:
    a platform zone, `psys` on some laptops, counts more than the CPU and is left out)."""
    try:
        entries = sorted(root.iterdir(), key=lambda p: int(p.name.split(":")[1]) if PACKAGE_ZONE.fullmatch(p.name) else -1)
    except OSError:
        return []
    return [p for p in entries if PACKAGE_ZONE.fullmatch(p.name) and _text(p / "name").startswith("package")]


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


class RaplSampler:
    """The energy counters (µJ) of the node's CPU packages, with the range at which each wraps."""

    name = "rapl"
    method = "rapl"

    def __init__(self, root: Union[str, Path] = POWERCAP) -> None:
        self.root = Path(root)
        self._zones: list[Path] = []
        self._ranges: list[int] = []

    def start(self, pid: int) -> None:
        """Finds the package zones and reads each once (the package is the node's, so a second
        call, with the trainer's pid, keeps them)."""
        if self._zones:
            return
        zones = package_zones(self.root)
        if not zones:
            raise SamplerUnavailable(f"no RAPL package zone under {self.root} (a VM, or a CPU without RAPL): "
                                     f"CPU energy n/a")
        try:
            ranges = [int((zone / "max_energy_range_uj").read_text()) for zone in zones]
            for zone in zones:
                int((zone / "energy_uj").read_text())
        except PermissionError as exc:
            raise SamplerUnavailable(f"{exc.filename} is readable by root only (Linux >= 5.10, CVE-2020-8694): "
                                     f"CPU energy n/a; a site can grant read access (e.g. a udev rule)") from None
        except (OSError, ValueError) as exc:
            raise SamplerUnavailable(f"RAPL under {self.root} cannot be read ({exc}): CPU energy n/a") from None
        self._zones, self._ranges = zones, ranges

    def sample(self) -> dict[str, Any]:
        return {"energy_uj": [int((zone / "energy_uj").read_text()) for zone in self._zones],
                "range_uj": self._ranges}

    def close(self) -> None:
        """Nothing to release (each read opens and closes its file); the zones stay for describe()."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "method": self.method, "zones": [z.name for z in self._zones],
                "measures": "each CPU package's energy: every process on the node"}
