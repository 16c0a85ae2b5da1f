"""Records the golden inputs for tests/test_snapshot_golden.py and (with --update) the expected files.

Each role type's files are written under a scratch root, the real capture script runs over
them with `sh` (as it does on a host over SSH), and the scratch prefix is rewritten to the
real paths in the `=file` lines (the content lines are untouched). The expected files are
then produced by the real parser and the real masking. Run:
    .venv/bin/python -m tests.helpers.snapshot_golden_record [--update]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rig.snapshot.capture import SCRIPT

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "snapshot"

UNIT = """[Unit]
Description=TabbyAPI serving {model}
After=network-online.target

[Service]
User=tabby
ExecStart=/opt/tabbyapi/venv/bin/python /opt/tabbyapi/main.py --config /opt/tabbyapi/config.yml
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

ROLES: dict[str, dict] = {
    "proxy": {
        "role": {"hosts": ["root@proxy-host"], "files": ["/etc/haproxy/haproxy.cfg"],
                 "commands": ["haproxy -v | head -1"], "volatile": [r"\d{4}/\d{2}/\d{2}"],
                 "validate": "haproxy -c -f {path}"},
        "files": {"/etc/haproxy/haproxy.cfg": ("""global
    maxconn 4096
    stats socket /run/haproxy/admin.sock mode 660 level admin

defaults
    mode http
    timeout connect 5s
    timeout client 600s
    timeout server 600s

frontend qwen_flash_next
    bind 10.0.0.2:8101
    default_backend qwen_flash_next

backend qwen_flash_next
    balance leastconn
    option httpchk GET /health
    server arm1 arm-node-1:5000 check maxconn 8
    server arm2 arm-node-2:5000 check maxconn 8
""", 0o644)},
        "secrets": [],
    },
    "gateway": {
        "role": {"hosts": ["root@gateway-host"],
                 "files": ["/etc/litellm/config.yaml", "/etc/litellm/keys.json", "/etc/litellm/extra.env"],
                 "commands": ["systemctl is-enabled litellm.service"], "masks": ["master_key"]},
        "files": {"/etc/litellm/config.yaml": ("""model_list:
  - model_name: qwen3.8-27b-fast
    litellm_params:
      model: openai/qwen3.8-27b-fast
      api_base: http://proxy-host:8102/v1
      api_key: sk-none
general_settings:
  master_key: sk-gw-master-5c2e7d19a04b3f86
  custom_auth: custom_auth.user_api_key_auth
  custom_auth_run_common_checks: true
litellm_settings:
  enable_post_custom_auth_checks: true
  num_retries: 0
""", 0o640),
                  "/etc/litellm/keys.json": (json.dumps({"keys": {
                      "sk-batch-8d1f0c2b9e7a6354": {"alias": "batch", "models": ["*"]},
                      "sk-writer-3a9e5b7c1d0f2468": {"alias": "nev-folknet-writer",
                                                      "models": ["qwen3.8-27b-fast"]}}}, indent=2) + "\n", 0o600)},
        "secrets": ["sk-gw-master-5c2e7d19a04b3f86", "sk-batch-8d1f0c2b9e7a6354", "sk-writer-3a9e5b7c1d0f2468"],
    },
    "units": {
        "role": {"hosts": ["root@arm-node-1"],
                 "files": ["/etc/systemd/system/tabbyapi.service", "/opt/tabbyapi/config.yml"],
                 "commands": ["systemctl is-enabled tabbyapi.service"]},
        "files": {"/etc/systemd/system/tabbyapi.service": (UNIT.format(model="qwen3.8-flash-next"), 0o644),
                  "/opt/tabbyapi/config.yml": ("""network:
  host: 0.0.0.0
  port: 5000
  disable_auth: false
  api_key: 9f3b2c7d1e8a4f6b0c5d2e9a7b3f1c8d
model:
  model_dir: /srv/models
  model_name: qwen3.8-flash-next-exl3-4.05bpw
  max_seq_len: 32768
  cache_mode: Q8
""", 0o640)},
        "secrets": ["9f3b2c7d1e8a4f6b0c5d2e9a7b3f1c8d"],
    },
    "vm": {
        "role": {"hosts": ["root@proxmox-node"], "files": ["/etc/pve/qemu-server/120.conf"], "commands": []},
        "files": {"/etc/pve/qemu-server/120.conf": ("""agent: 1
bios: ovmf
cores: 32
cpu: host
efidisk0: local-lvm:vm-120-disk-0,efitype=4m,size=4M
hostpci0: 0000:41:00,pcie=1
hostpci1: 0000:42:00,pcie=1
hostpci2: 0000:61:00,pcie=1
hostpci3: 0000:62:00,pcie=1
machine: q35
memory: 163840
name: four-card-vm
net0: virtio=BC:24:11:00:00:01,bridge=vmbr0
scsi0: local-lvm:vm-120-disk-1,size=120G
""", 0o640)},
        "secrets": [],
    },
}


def record(kind: str, scratch: Path) -> str:
    spec = ROLES[kind]
    for path, (text, mode) in spec["files"].items():
        p = scratch / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        os.chmod(p, mode)
        os.chown(p, 0, 0)
    for unit_cmd in spec["role"]["commands"]:
        if unit_cmd.startswith("systemctl is-enabled "):
            unit = unit_cmd.split()[-1]
            u = scratch / "etc/systemd/system" / unit
            if not u.exists():
                u.parent.mkdir(parents=True, exist_ok=True)
                u.write_text(UNIT.format(model="x"))
            subprocess.run(["systemctl", f"--root={scratch}", "enable", unit], check=True, capture_output=True)
    files = [str(scratch / p.lstrip("/")) for p in spec["role"]["files"]]
    cmds = [c.replace("systemctl ", f"systemctl --root={scratch} ") for c in spec["role"]["commands"]]
    out = subprocess.run(["sh", "-c", SCRIPT, "nev-capture", str(len(files)), *files, *cmds],
                         capture_output=True, check=True).stdout.decode()
    return out.replace(f"=file {scratch}/", "=file /")


def main(update: bool) -> None:
    from tests.test_snapshot_golden import expected

    for kind in ROLES:
        d = GOLDEN / kind
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as t:
            raw = record(kind, Path(t))
        (d / "host-output.txt").write_text(raw)
        (d / "role.json").write_text(json.dumps({**ROLES[kind]["role"], "secrets": ROLES[kind]["secrets"]},
                                                indent=2) + "\n")
        if update:
            rec, red = expected(kind)
            (d / "record.json").write_text(rec)
            (d / "redacted.txt").write_text(red)
        print(f"recorded {kind}")


if __name__ == "__main__":
    main("--update" in sys.argv)
