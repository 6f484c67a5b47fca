"""The fleet as data: load and validate an inventory, resolve inheritance, size adapters."""

from lorafleet.inventory.capacity import LoadModel
from lorafleet.inventory.loader import load_inventory
from lorafleet.inventory.model import Adapter, BaseModel, Engine, Host, Inventory, Tenant

__all__ = [
    "Adapter",
    "BaseModel",
    "Engine",
    "Host",
    "Inventory",
    "LoadModel",
    "Tenant",
    "load_inventory",
]
