"""The masking helper hides credentials in every shape they take."""

import pytest

from jobs.archive import ADDRESS_MARK, scrub
from lanes.base.mask import mask, register_secret

TOKEN = "f3a9c2e1b7d84c6a9e0f1a2b3c4d5e6f7a8b9c0d"


def test_token_inside_git_url():
    out = mask(f"fatal: unable to access 'http://forge-user:{TOKEN}@198.18.0.5/owner/repo.git/'")
    assert TOKEN not in out and "forge-user" not in out
    assert "http://***@198.18.0.5/owner/repo.git" in out


def test_authorization_header():
    for line in [f"Authorization: Bearer {TOKEN}", "authorization: Basic Zm9yZ2U6c2VjcmV0cGFzcw==",
                 f"-H 'Authorization: token {TOKEN}'"]:
        out = mask(line)
        assert TOKEN not in out and "Zm9yZ2U6c2VjcmV0cGFzcw" not in out, out
        assert "***" in out


def test_model_api_key_assignment():
    out = mask("export NEV_MODEL_API_KEY=sk-box-1234 NEV_MODEL_URL=http://gw:4000")
    assert "sk-box-1234" not in out
    assert "NEV_MODEL_API_KEY=***" in out
    assert "NEV_MODEL_URL=http://gw:4000" in out


def test_json_secret_field():
    out = mask('{"master_key": "hunter2hunter2", "model": "qwen"}')
    assert "hunter2" not in out and '"model": "qwen"' in out


def test_token_shaped_strings():
    assert "ghp_" not in mask("token ghp_" + "a" * 36)
    for token in ("F3a9C2e1B7d84c6a9e0f1a2b3c4d5e6f7a8b9c0d", "3a9c2e1b7d84c6a9e0f1a2b3c4d5e6f7",
                  "f3a9c2e1b7d84c6a9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f"):
        assert token not in mask(f"the value is {token} here")


def test_commit_ids_and_digests_are_not_secrets_but_a_registered_or_labelled_one_still_is():
    """Issue 31: commit SHAs and the lane agent's hash were masked as *** in errors and -v."""
    sha1, sha256 = "f3a9c2e1b7d84c6a9e0f1a2b3c4d5e6f7a8b9c0d", "ab" * 32
    line = f"git update-ref refs/nev/wt {sha1} (agent {sha256})"
    assert mask(line) == line
    assert mask(f"NEV_FORGE_TOKEN={sha1}") == "NEV_FORGE_TOKEN=***"
    assert sha1 not in mask(f"http://nev:{sha1}@forge/x.git")
    forge_token = "9" * 8 + "e" * 32                # 40 hex digits, as a forge's tokens are
    register_secret(forge_token)
    assert forge_token not in mask(f"the value is {forge_token} here")


def test_registered_secret_of_any_shape():
    register_secret("plainword99")
    assert "plainword99" not in mask("password was plainword99, oops")


def test_plain_text_is_untouched():
    s = "git fetch origin main: 3 objects, 12 KiB in 0.2 s (lane 0)"
    assert mask(s) == s


def test_a_sudoers_nopasswd_tag_keeps_its_command_and_a_password_assignment_is_still_masked():
    line = "nevadm ALL=(root) NOPASSWD: /srv/units/gpu0-r0 start, \\"
    assert mask(line) == line
    assert mask("DB_PASSWD: hunter2hunter2") == "DB_PASSWD: ***"
    assert mask("ROOT_PASSWD=hunter2hunter2 NOPASSWD=x") == "ROOT_PASSWD=*** NOPASSWD=x"


def test_ssh_options_named_like_keys_keep_their_values_and_real_secrets_beside_them_do_not():
    argv = "ssh -o StrictHostKeyChecking=yes -o PasswordAuthentication=no -o HostKeyAlias=lane0 -o PubkeyAuthentication=yes"
    assert mask(argv) == argv
    assert mask("-o StrictHostKeyChecking=yes API_KEY=s3cr3tvalue") == "-o StrictHostKeyChecking=yes API_KEY=***"
    assert mask("SSH_HOST_KEY_PASSPHRASE=hunter2hunter2") == "SSH_HOST_KEY_PASSPHRASE=***"


@pytest.mark.parametrize("unit,size", [("x", 1_000_000), ("a.", 200_000), ("a-", 200_000)])
def test_a_long_line_without_spaces_is_masked_in_one_pass_and_its_credential_found(unit, size):
    """A long line without spaces (minified output, a blob printed whole) is masked in about the
    time it takes to read: every pattern is bounded before its anchor (`://`, `@`, the secret's
    name). Unbounded, `mask` took 15 s for 100 KB of "x" (2 s for 10 KB of "a.") and grew with the
    square of the length: these lines would outlast the suite's timeout."""
    tail = " https://user:pw-in-url@forge.example/x NEV_FORGE_TOKEN=abcdef12"
    out = mask(unit * (size // len(unit)) + tail)
    assert out.endswith(" https://***@forge.example/x NEV_FORGE_TOKEN=***") and len(out) == size + len(tail) - 16


def test_a_long_dotted_line_is_scrubbed_in_one_pass_and_its_address_found():
    assert scrub("1." * 500_000 + " someone@host.example").endswith(" " + ADDRESS_MARK)
