"""How a report names a hardware configuration and orders them (no heavy imports: the
launcher's dry run counts cells by these labels too)."""
from __future__ import annotations

from typing import Any, Optional

#: The order datasets and networks are listed in (the study's order); others follow, by name.
DATASETS = ("mnist", "cifar10", "cifar100", "svhn", "imagenet", "synthetic")
MODELS = ("lenet", "alexnet", "resnet50", "googlenet", "vgg16", "fcn_s", "fcn_r", "resnet56", "alexnet_r",
          "vgg16_cifar", "googlenet_cifar", "lstm")


def hardware_label(hardware: Optional[str], gpus: Optional[int], threads: Optional[int] = None) -> str:
    """`cpu12`, `k20m ×1`, `p100 ×2`; `local, 4 threads` where threads are part of the label."""
    label = str(hardware or "?") + (f" ×{gpus}" if gpus else "" if gpus == 0 else " ×?")
    return label + (f", {threads} thread{'s' if threads != 1 else ''}" if threads is not None else "")


def hardware_order(hardware: Optional[str], gpus: Optional[int], threads: Optional[int] = None) -> tuple:
    """CPU configurations first, then GPU ones by hardware and count; threads ascending."""
    return (bool(gpus), hardware or "", gpus if gpus is not None else -1, threads if threads is not None else -1)


def order_of(value: Any, known: tuple[str, ...]) -> tuple:
    """Sort key: a value's place in `known`, then the others by name."""
    return (known.index(value), "") if value in known else (len(known), str(value))
