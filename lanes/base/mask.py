"""Masking of secrets in anything that may be logged, printed or archived.

Replaces credentials inside URLs, values of KEY/TOKEN/SECRET/PASSWORD-named
assignments and headers, `Authorization` headers and token-shaped strings.
Known secret values (registered with `register_secret`) are replaced too,
whatever shape they have.

Values that are not secret keep their shape: a run of exactly 40 or 64 lowercase hex digits is
a git object id or a sha256 digest (a commit, the lane agent's hash) and is left as it is,
unless it is a registered secret or stands where a secret does (a URL's credential, a
KEY/TOKEN-named assignment, an Authorization header). Any other long run of letters and digits
is masked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"

SECRET_NAME = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)")

_URL_CRED = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,31}://)(?P<cred>[^/\s:@]+(?::[^/\s@]*)?)@")
_AUTH_HEADER = re.compile(r"(?i)(?P<head>\b(?:proxy-)?authorization\s*[:=]\s*)(?P<scheme>(?:basic|bearer|token)\s+)?(?P<val>[^\s'\",;]+)")
_ASSIGN = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]{0,63}(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Za-z0-9_]{0,63})"
    r"(?P<sep>\s*[=:]\s*|\"\s*:\s*\"|'\s*:\s*')(?P<q>[\"']?)(?P<val>[^\s\"',;}]+)",
    re.IGNORECASE,
)
# Token-shaped: common prefixes, or long high-entropy runs of letters and digits.
_TOKEN_SHAPED = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abpr]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
)
_HEX_OR_B64 = re.compile(r"\b(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{32,}\b")

_known: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret value so it is masked wherever it appears, whatever its shape."""
    if value and len(value) >= 4:
        _known.add(value)


def known_secrets() -> frozenset[str]:
    return frozenset(_known)


# Names that contain KEY/PASSWORD/... but hold no secret: sudoers' NOPASSWD: tag (a command
# follows it) and OpenSSH options whose values are yes/no, algorithm names or aliases.
NOT_SECRET_NAMES = frozenset(
    n.upper()
    for n in (
        "NOPASSWD",
        "StrictHostKeyChecking",
        "HostKeyAlgorithms",
        "HostKeyAlias",
        "UpdateHostKeys",
        "VerifyHostKeyDNS",
        "PubkeyAuthentication",
        "PubkeyAcceptedKeyTypes",
        "PubkeyAcceptedAlgorithms",
        "PasswordAuthentication",
        "KbdInteractiveAuthentication",
    )
)


def _masked_assignment(m: re.Match[str]) -> str:
    if m.group("name").upper() in NOT_SECRET_NAMES:
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{m.group('q')}{MASK}"


def mask(text: str, extra: Iterable[str] = ()) -> str:
    """Return `text` with every credential replaced by ***."""
    if not text:
        return text
    for value in sorted({*_known, *(e for e in extra if e and len(e) >= 4)}, key=len, reverse=True):
        text = text.replace(value, MASK)
    text = _URL_CRED.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group('head')}{m.group('scheme') or ''}{MASK}", text)
    text = _ASSIGN.sub(_masked_assignment, text)
    text = _TOKEN_SHAPED.sub(MASK, text)
    text = _HEX_OR_B64.sub(_masked_run, text)
    return text


_DIGEST = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _masked_run(m: re.Match[str]) -> str:
    """A long run of letters and digits masked, unless it is a git object id or a sha256 digest."""
    return m.group(0) if _DIGEST.fullmatch(m.group(0)) else MASK


def mask_argv(argv: Iterable[str]) -> str:
    """A printable, masked form of a command line."""
    import shlex

    return mask(" ".join(shlex.quote(a) for a in argv))


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))
