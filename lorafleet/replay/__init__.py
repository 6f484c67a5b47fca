"""Replay: drive the policy core over a recorded or synthetic log with simulated engines."""
