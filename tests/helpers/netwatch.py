"""Packet watcher for tests: every packet leaving by a non-loopback interface, and any DNS
packet on loopback, as one JSON line each. Run inside a network namespace (root):
`python netwatch.py OUT_FILE`; stops on SIGTERM. Writes `ready` to OUT_FILE.ready once listening.
"""

import json
import signal
import socket
import struct
import sys

ETH_P_ALL = 0x0003


def describe(frame: bytes) -> dict:
    eth_type = struct.unpack("!H", frame[12:14])[0]
    d = {"eth_type": hex(eth_type)}
    if eth_type == 0x0800 and len(frame) >= 34:
        ihl = (frame[14] & 0x0F) * 4
        proto = frame[23]
        d.update(proto=proto, src=socket.inet_ntoa(frame[26:30]), dst=socket.inet_ntoa(frame[30:34]))
        if proto in (6, 17) and len(frame) >= 14 + ihl + 4:
            d["sport"], d["dport"] = struct.unpack("!HH", frame[14 + ihl:18 + ihl])
    elif eth_type == 0x86DD and len(frame) >= 58:
        proto = frame[20]
        d.update(proto=proto, src=socket.inet_ntop(socket.AF_INET6, frame[22:38]),
                 dst=socket.inet_ntop(socket.AF_INET6, frame[38:54]))
        if proto in (6, 17):
            d["sport"], d["dport"] = struct.unpack("!HH", frame[54:58])
    return d


def main() -> None:
    out = open(sys.argv[1], "a", buffering=1)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.settimeout(0.2)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    with open(sys.argv[1] + ".ready", "w") as f:
        f.write("ready\n")
    while not stop:
        try:
            frame, addr = s.recvfrom(65535)
        except TimeoutError:
            continue
        except InterruptedError:
            continue
        ifname, pkttype = addr[0], addr[2]
        if ifname == "lo" and pkttype != socket.PACKET_OUTGOING:
            continue  # loopback packets are seen twice; keep the outgoing copy
        d = describe(frame)
        d["if"] = ifname
        if ifname == "lo" and 53 not in (d.get("sport"), d.get("dport")):
            continue
        out.write(json.dumps(d) + "\n")


if __name__ == "__main__":
    main()
