"""`nev rig forward`: the development box's local port forwards through the jump host, held up.

`state` (the per-forward state file and capped log), `check` (the real request that says a
forward is up), `supervise` (one process per forward that keeps its OpenSSH client running),
`control` (up, down, status, the @reboot line).
"""
