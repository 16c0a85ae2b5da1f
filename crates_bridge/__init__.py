"""The narrow bridge between this Python tooling and the engine's Rust workspace.

This package owns the function registry (discovered from provenance records),
candidate crates, batch compilation, the runner protocol (run a function over a
corpus, read per-case JSON) and the small example engine workspace that the
tests and the demo use. It imports none of the other packages.
"""
