"""lorafleet: keep the right LoRA adapters resident across a GPU fleet."""

__version__ = "0.1.0"
