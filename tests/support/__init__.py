"""Test support shared by the suites: real Prometheus peers, a capture server, RW bodies."""
