"""The generation loop.

This package owns prompt building, the gateway client and its pacer, the
best-of-N batch, escalation, the three-browser oracle and its corpus, scoring,
score floors, provenance records, the ledger and phase timing. It may import
`crates_bridge` and `lanes`.
"""
