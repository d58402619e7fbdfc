"""The GPU node types a cluster can launch: one per GPU accelerator of the price catalog and
purchase option, with what Ray sees on such a node and what AWS bills for it."""

from __future__ import annotations

from pydantic import Field, PositiveFloat, PositiveInt

from core.config_base import ConfigError, StrictModel
from core.price_catalog import PriceCatalog, Purchase

PURCHASES: tuple[Purchase, ...] = ("on_demand", "spot")
# How node type names spell the purchase: `ray.worker.h100.on-demand`, `ray.worker.h100.spot`.
_PURCHASE_SUFFIX = {"on_demand": "on-demand", "spot": "spot"}


def accelerator_resource(accelerator: str) -> str:
    """Ray's custom resource for an accelerator type; a replica asks for 0.001 of it per GPU."""
    return f"accelerator_type:{accelerator}"


class NodeType(StrictModel):
    """One kind of GPU machine, bought one way."""

    name: str = Field(description="The node type's name in the launcher config and the KubeRay worker group.")
    accelerator: str = Field(description="The catalog's name, which is Ray's accelerator type (`H100`).")
    instance_type: str = Field(description="The EC2 instance type.")
    purchase: Purchase
    gpus: PositiveInt = Field(description="GPUs per node.")
    vcpus: PositiveInt = Field(description="vCPUs per node: what the EC2 vCPU quotas count.")
    gpu_memory_gib: PositiveFloat = Field(description="Memory of one GPU.")
    usd_per_hour: float = Field(ge=0, description="What AWS bills for one node-hour (catalog price x GPUs).")
    ray_accelerator_labels: tuple[str, ...] = Field(
        description="Accelerator types the node advertises: the catalog's name, and Ray's own "
        "detection when it differs (`A100` for `A100-80G`)."
    )

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpus

    @property
    def label(self) -> str:
        """For people: `H100 p5.48xlarge spot`."""
        return f"{self.accelerator} {self.instance_type} {_PURCHASE_SUFFIX[self.purchase]}"

    def ray_resources(self) -> dict[str, float]:
        """What the autoscaler must know a node of this type brings before it launches one.
        Real nodes detect CPU and GPU themselves; the accelerator labels are what replicas ask
        for, so the autoscaler can only match demand to this type if it sees them."""
        return {"CPU": self.vcpus, "GPU": self.gpus,
                **{accelerator_resource(label): 1 for label in self.ray_accelerator_labels}}


def node_type_name(accelerator: str, purchase: Purchase) -> str:
    return f"ray.worker.{accelerator.lower()}.{_PURCHASE_SUFFIX[purchase]}"


def gpu_node_types(catalog: PriceCatalog) -> list[NodeType]:
    """Every GPU accelerator of the catalog that names an instance, bought on demand and on spot.
    Entries without GPU memory (the `cpu` one) are not GPU nodes."""
    found = []
    for accelerator, price in catalog.accelerators.items():
        if price.gpu_memory_gib is None or not price.aws_instance_type:
            continue
        if price.vcpus_per_instance is None:
            raise ConfigError(f"price catalog: accelerators.{accelerator} needs vcpus_per_instance "
                              "(the vCPUs of its instance) to be planned as a node type")
        labels = (accelerator,) + ((price.ray_detects_as,) if price.ray_detects_as else ())
        for purchase in PURCHASES:
            found.append(NodeType(
                name=node_type_name(accelerator, purchase), accelerator=accelerator,
                instance_type=price.aws_instance_type, purchase=purchase, gpus=price.units_per_instance,
                vcpus=price.vcpus_per_instance, gpu_memory_gib=price.gpu_memory_gib,
                usd_per_hour=price.usd_per_hour(purchase) * price.units_per_instance,
                ray_accelerator_labels=labels,
            ))
    return found
