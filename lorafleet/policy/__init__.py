"""The pure policy core: events in, decisions out, time passed in. No I/O, no sleeping, no wall clock."""
