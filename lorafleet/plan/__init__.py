"""The residency plan: demand over a window, placement, the plan file and its diffs, launch flags and sizing."""
