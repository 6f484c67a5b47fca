"""The live driver: follows the gateway's logs, runs the policy core, acts on the engines, journals it all."""
