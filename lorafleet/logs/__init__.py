"""Gateway access logs into request events: JSON lines and nginx `log_format`, with the inventory's mapping."""
