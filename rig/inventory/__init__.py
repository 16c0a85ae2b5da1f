"""The rig inventory: hosts advertise over mDNS and HTTP, a collector aggregates, a probe
checks each model alias for readiness, and `nev rig status` prints the snapshot."""
