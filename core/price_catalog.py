"""The price catalog: $/hour per accelerator unit, on demand and spot, board power, energy
price and the cloud premium; and what one replica of a pool costs per second from it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from core.config import ConfigError, StrictModel

DEFAULT_CATALOG_PATH = Path(__file__).with_name("prices.yaml")

Purchase = Literal["on_demand", "spot"]


class AcceleratorPrice(StrictModel):
    description: str = ""
    aws_instance_type: str | None = Field(
        None, description="The instance live AWS prices are looked up for (price / units_per_instance)."
    )
    units_per_instance: PositiveInt = 1
    vcpus_per_instance: PositiveInt | None = Field(
        None, description="vCPUs of the instance: what EC2's vCPU quotas count (`trilemma cluster check`)."
    )
    gpu_memory_gib: PositiveFloat | None = Field(
        None, description="Memory of one GPU; a pool's gpu_memory_gib need is held against it (`cluster plan`)."
    )
    ray_detects_as: str | None = Field(
        None, description="The accelerator type Ray detects on such a node when it differs from the "
        "catalog's name (both A100 sizes are `A100` to Ray); nodes carry both labels.",
    )
    on_demand_usd_per_hour: NonNegativeFloat
    spot_usd_per_hour: NonNegativeFloat
    board_power_watts: NonNegativeFloat

    def usd_per_hour(self, purchase: Purchase) -> float:
        return self.on_demand_usd_per_hour if purchase == "on_demand" else self.spot_usd_per_hour


class PriceCatalog(StrictModel):
    as_of: str = Field(description="When the prices were taken, for people reading a bill.")
    energy_usd_per_kwh: NonNegativeFloat
    cloud_premium_multiplier: float = Field(
        ge=1.0, description="Platform fees, support, egress: the factor on hardware + energy (>= 1)."
    )
    accelerators: dict[str, AcceleratorPrice]

    @classmethod
    def from_yaml(cls, path: str | Path = DEFAULT_CATALOG_PATH) -> PriceCatalog:
        try:
            raw = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"{path}: cannot read the price catalog: {error}") from None
        return cls.validated(raw, str(path))

    def accelerator(self, name: str) -> AcceleratorPrice:
        # Ray names GPUs as `H100`; configs may say `h100`: prices are looked up either way.
        by_lower = {key.lower(): price for key, price in self.accelerators.items()}
        price = by_lower.get(name.lower())
        if price is None:
            raise ConfigError(
                f"accelerator {name!r} is not in the price catalog; known: {sorted(self.accelerators)}"
            )
        return price

    def with_prices(self, name: str, *, on_demand: float | None, spot: float | None) -> PriceCatalog:
        """A copy with one accelerator's per-unit prices replaced (live prices do this)."""
        current = self.accelerator(name)
        updated = current.model_copy(update={
            "on_demand_usd_per_hour": current.on_demand_usd_per_hour if on_demand is None else on_demand,
            "spot_usd_per_hour": current.spot_usd_per_hour if spot is None else spot,
        })
        key = next(k for k in self.accelerators if k.lower() == name.lower())
        return self.model_copy(update={"accelerators": {**self.accelerators, key: updated}})


class ReplicaRate(StrictModel):
    """What one replica costs per second while it exists, by term."""

    hardware_usd_per_s: NonNegativeFloat
    energy_usd_per_s: NonNegativeFloat
    premium_multiplier: PositiveFloat

    @property
    def usd_per_s(self) -> float:
        return (self.hardware_usd_per_s + self.energy_usd_per_s) * self.premium_multiplier

    @property
    def usd_per_hour(self) -> float:
        return self.usd_per_s * 3600

    def breakdown(self, seconds: float) -> dict[str, float]:
        """Dollars for `seconds` of this replica, split into the terms a bill shows."""
        hardware = self.hardware_usd_per_s * seconds
        energy = self.energy_usd_per_s * seconds
        premium = (hardware + energy) * (self.premium_multiplier - 1)
        return {"total": hardware + energy + premium, "hardware": hardware, "energy": energy, "premium": premium}


def replica_rate(
    catalog: PriceCatalog, accelerator: str, units: float, purchase: Purchase,
    override_usd_per_hour: float | None = None,
) -> ReplicaRate:
    """`units` GPUs (or vCPUs) of `accelerator`, bought `purchase`. An override replaces the
    hardware price; energy (when the catalog knows the accelerator's power) and premium
    still apply, so an accelerator the catalog lacks can still be priced by override."""
    if override_usd_per_hour is not None:
        try:
            watts = catalog.accelerator(accelerator).board_power_watts
        except ConfigError:
            watts = 0.0
        hardware_per_hour = override_usd_per_hour
    else:
        price = catalog.accelerator(accelerator)
        watts = price.board_power_watts
        hardware_per_hour = price.usd_per_hour(purchase) * units
    energy_per_hour = watts * units / 1000 * catalog.energy_usd_per_kwh
    return ReplicaRate(
        hardware_usd_per_s=hardware_per_hour / 3600,
        energy_usd_per_s=energy_per_hour / 3600,
        premium_multiplier=catalog.cloud_premium_multiplier,
    )
