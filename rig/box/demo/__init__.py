"""`nev box demo` (`steps.py`): the whole mission end to end on the rig-in-a-box, with its bank
for the stand-in pools (`bank.py`), how it runs its commands (`commands.py`) and its bookkeeping
(`report.py`). Outside this folder's code, only the box's CLI starts it."""
