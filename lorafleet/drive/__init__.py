"""The session kernel both drivers run: the policy core's time order, outcomes, waits and counts."""
