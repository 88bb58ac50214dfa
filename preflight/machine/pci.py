"""NVIDIA GPUs on the PCI bus, read from sysfs: what says a node is a GPU node whatever software it has.

node.environment records them so that the verdict can tell "GPU node without a driver" (blocking) from
"CPU node" (GPU checks do not apply); gpu.visibility reads them to say which of the two it saw.
"""

from __future__ import annotations

import os
from typing import Any

PCI_ROOT = "/sys/bus/pci/devices"
NVIDIA_VENDOR = 0x10DE
# PCI base class 0x03 is a display controller (0x0300 VGA, 0x0302 3D controller: data-centre GPUs).
# NVSwitches and NVIDIA's network and bridge devices share the vendor id but not this class.
DISPLAY_CLASS = 0x03


def _read_hex(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().strip(), 16)
    except (OSError, ValueError):
        return None


def nvidia_pci_gpus(root: str = PCI_ROOT) -> list[dict[str, Any]]:
    """NVIDIA GPUs on the PCI bus, with the kernel driver each is bound to (None: no driver).

    Read from sysfs, so it works with no NVIDIA software installed at all: this is what says a node
    is a GPU node whose driver is missing, rather than a CPU node.
    """
    gpus = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    for name in names:
        device = os.path.join(root, name)
        if _read_hex(os.path.join(device, "vendor")) != NVIDIA_VENDOR:
            continue
        pci_class = _read_hex(os.path.join(device, "class"))
        if pci_class is None or pci_class >> 16 != DISPLAY_CLASS:
            continue
        driver_link = os.path.join(device, "driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
        device_id = _read_hex(os.path.join(device, "device"))
        gpus.append({"address": name, "class": f"0x{pci_class:06x}",
                     "device": f"0x{device_id:04x}" if device_id is not None else None, "driver": driver})
    return gpus
