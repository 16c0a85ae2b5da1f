"""The lane's audio sink: a PulseAudio daemon with one null sink, so a realtime AudioContext runs
in the three browsers (the reference rig's lanes carry one; docs/lanes.md "The audio sink").

    file                                           what it is
    /etc/nev/pulse.pa                              the daemon's one script: socket, null sink
    /etc/systemd/system/nev-pulse.service          the daemon, as the lane user, started at boot
    /etc/pulse/client.conf.d/nev-null-sink.conf    every client on the guest finds it (no autospawn)

A lane has no logind session (sshd runs without PAM), so PulseAudio's own per-user socket
activation never starts: a system unit runs it as the lane user with its runtime folder under
/run. The socket takes anonymous clients because the browsers run with a scratch HOME (no cookie);
its folder is the lane user's. The same files go into the lane image (`lanes/create.py`) and
through `nev lane provision` (`step`); `nev doctor` reads `pactl info` (`DOCTOR_FACT`).
"""

from __future__ import annotations

import hashlib
import shlex

UNIT = "nev-pulse.service"
RUN_DIR = "/run/nev-pulse"
SOCKET = f"{RUN_DIR}/native"
SINK = "nev_null"
PACKAGES = ("pulseaudio", "gstreamer1.0-pulseaudio")  # the daemon (pactl with it); WebKit's sink

PA_SCRIPT = f"""# written by nev (lanes/audio.py): the lane's audio sink, nothing else
load-module module-native-protocol-unix auth-anonymous=1 socket={SOCKET}
load-module module-null-sink sink_name={SINK} sink_properties=device.description=nev-null-sink
set-default-sink {SINK}
"""

# the daemon: no autospawned or per-user one, no exit when idle, only /etc/nev/pulse.pa's modules
PULSE_ARGV = ("/usr/bin/pulseaudio", "--daemonize=no", "--system=no", "--exit-idle-time=-1",
              "--disallow-exit=yes", "--use-pid-file=no", "-n", "-F", "/etc/nev/pulse.pa",
              "--log-target=stderr")
UNIT_TEXT = f"""# written by nev (lanes/audio.py): a PulseAudio null sink for the lane's browsers
[Unit]
Description=PulseAudio null sink for the lane's browsers (nev)
After=local-fs.target

[Service]
User=lane
RuntimeDirectory=nev-pulse
RuntimeDirectoryMode=0755
Environment=XDG_RUNTIME_DIR={RUN_DIR} HOME={RUN_DIR}
ExecStart={" ".join(PULSE_ARGV)}
Restart=on-failure
RestartSec=2

[Install]
WantedBy=multi-user.target
"""

CLIENT_CONF = f"""# written by nev (lanes/audio.py): the lane's one PulseAudio daemon
default-server = unix:{SOCKET}
autospawn = no
"""

FILES: tuple[tuple[str, str], ...] = (
    ("/etc/nev/pulse.pa", PA_SCRIPT),
    (f"/etc/systemd/system/{UNIT}", UNIT_TEXT),
    ("/etc/pulse/client.conf.d/nev-null-sink.conf", CLIENT_CONF),
)
ENABLE_LINK = f"/etc/systemd/system/multi-user.target.wants/{UNIT}"

# `pactl info` as the lane user: the default sink's name (empty when no daemon answers)
PACTL_SINK = f"pactl -s unix:{SOCKET} info 2>/dev/null | sed -n 's/^Default Sink: //p'"
DOCTOR_FACT = f"audio_sink=$({PACTL_SINK})"


def digest() -> str:
    """The files' digest, for the image's key: a change to them is a new image."""
    return hashlib.sha256("\0".join(p + "\0" + t for p, t in FILES).encode()).hexdigest()[:16]


def _write(path: str, content: str) -> str:
    tag = "NEV_AUDIO_" + hashlib.sha256(content.encode()).hexdigest()[:12]
    return (
        f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])}\n"
        f"cat > \"$R\"{shlex.quote(path)} <<'{tag}'\n{content}{tag}\n"
    )


def install_script(root: str = "") -> str:
    """Shell lines putting the files under `root` ("" on a running guest, the image's rootfs
    while it is built: `$R` is that root) and enabling the unit by its link (no systemctl
    needed)."""
    lines = [f"R={root}"] + [
        _write(p, t).replace("mkdir -p ", 'mkdir -p "$R"', 1) for p, t in FILES
    ]
    lines.append(f'mkdir -p "$R"{shlex.quote(ENABLE_LINK.rsplit("/", 1)[0])}')
    lines.append(
        f'ln -sf {shlex.quote("/etc/systemd/system/" + UNIT)} "$R"{shlex.quote(ENABLE_LINK)}'
    )
    return "\n".join(lines) + "\n"


def check_script() -> str:
    """Exit 0 when the files are as written, the unit enabled and the sink the default one (the
    commands on one line, the files' texts as here-documents after it)."""
    tags = [f"NEV_AUDIO_{hashlib.sha256(t.encode()).hexdigest()[:12]}" for _, t in FILES]
    cmds = [f"cmp -s {shlex.quote(p)} - <<'{tag}'" for (p, _), tag in zip(FILES, tags, strict=True)]
    cmds.append(f"[ -L {shlex.quote(ENABLE_LINK)} ]")
    cmds.append(f'[ "$(runuser -u lane -- sh -c {shlex.quote(PACTL_SINK)})" = {SINK} ]')
    bodies = "".join(f"{t}{tag}\n" for (_, t), tag in zip(FILES, tags, strict=True))
    return " && ".join(cmds) + "\n" + bodies.rstrip("\n")


def apply_script() -> str:
    """On a running guest: the files, then the unit (re)started so the sink is there now."""
    return (
        install_script()
        + "systemctl daemon-reload && systemctl restart "
        + UNIT
        + f" && for i in $(seq 50); do [ -S {SOCKET} ] && break; sleep 0.1; done"
    )
