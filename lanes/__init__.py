"""The development box <-> build lane path.

This package owns everything that moves work from a worktree to a build lane
and back: the payload (bundle, diff, untracked files), the SSH transport, the
lane agent (`lanes/agent/`, the one program that runs on a lane), the
on-lane/lane-only rules, the disk guard, the sweep, provisioning, shared-folder
links and credential hygiene. It is also the lowest layer of the toolkit: the
settings registry, the masking helper, the error type and the git and SSH choke
points live here, because every other package reaches lanes through them.
"""
