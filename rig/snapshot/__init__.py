"""Snapshot and restore of every role's serving configuration (`nev rig snapshot|restore|snapshots|diff`)."""
