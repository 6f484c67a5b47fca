"""Engine actions an admin runs now: warm and unload, their targets, and the runner they share."""
