"""Secrets never reach the disk: the redactor and a canary grep over the whole state dir."""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

from state import MASK, HistoryEntry, Redactor, ResourceStatus, Store, utc_now
from state.keys import Key
from state.redaction import _json_inner, go_quoted, redact_urls


def test_scrub_text_longest_first_and_short_values_ignored() -> None:
    redactor = Redactor()
    redactor.register("abcd")
    redactor.register("abcdefgh")
    redactor.register("abc")  # too short: ignored
    redactor.register("abcd")  # duplicate
    assert redactor.values_count == 2
    assert redactor.scrub_text("x abcdefgh y abcd z abc") == f"x {MASK} y {MASK} z abc"


def test_scrub_recurses_into_keys_values_lists_tuples() -> None:
    redactor = Redactor()
    redactor.register("hunter22")
    obj = {"hunter22": ["pw=hunter22", ("hunter22", 3)], "n": 1, "b": None}
    assert redactor.scrub(obj) == {MASK: [f"pw={MASK}", (MASK, 3)], "n": 1, "b": None}


def test_register_is_thread_safe() -> None:
    redactor = Redactor()

    def register(base: int) -> None:
        for i in range(200):
            redactor.register(f"secret-{base}-{i}")

    threads = [threading.Thread(target=register, args=(b,)) for b in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert redactor.values_count == 1600
    assert redactor.scrub_text("secret-7-199") == MASK


def test_canary_never_reaches_state_dir(tmp_path: Path) -> None:
    canary = "canary-" + secrets.token_hex(16)
    redactor = Redactor()
    redactor.register(canary)
    root = tmp_path / "state"
    store = Store(root, redactor)

    def mutate(status: ResourceStatus) -> None:
        status.facts = {"env": {"NGC_API_KEY": canary}, canary: "as a key", "list": [canary]}
        status.applied_spec = {"secretRefs": [{"fromEnv": "NGC_API_KEY", "value": canary}]}
        status.set_condition("Degraded", "True", "AuthFailed", f"login with {canary} failed")
        status.add_history(
            HistoryEntry(
                time=utc_now(),
                action="create",
                target="container rtvi-vlm",
                cause="spec changed",
                result="error",
                detail=f"docker said: bad token {canary}!",
            )
        )

    store.update(Key("Deployment", "vlm"), mutate)
    event = store.events.append(Key("Deployment", "vlm"), "Warning", "AuthFailed",
                                f"token={canary}")
    assert canary not in event.message
    store.instance("prod")
    with store.lock():
        pass

    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) >= 4  # status, events, instance, lock
    for path in files:
        assert canary.encode() not in path.read_bytes(), path
    joined = b"".join(p.read_bytes() for p in files)
    assert MASK.encode() in joined  # the secret was there, and was masked
    loaded = store.load(Key("Deployment", "vlm"))
    assert loaded is not None
    assert loaded.facts["env"]["NGC_API_KEY"] == MASK


# What Docker (runc) answered, verbatim, when asked to start a container whose env carried the
# value below: it quotes ``KEY=value`` Go-style (%q), so the raw value never appears in it.
HOSTILE_VALUE = "ab\x00c\"d\\e\u00e9\u2603\x1bz-canary"
DOCKER_ERROR = ("failed to create shim task: OCI runtime create failed: runc create failed: "
                "unable to start container process: error during container init: environment "
                "variable value can't contain null(\\x00): "
                "\"HF_TOKEN=ab\\x00c\\\"d\\\\e\u00e9\u2603\\x1bz-canary\": unknown")


def test_every_encoded_form_of_a_hostile_value_is_masked() -> None:
    import json

    redactor = Redactor()
    redactor.register(HOSTILE_VALUE)
    forms = {
        "raw": f"token {HOSTILE_VALUE} end",
        "docker-go-quoted": DOCKER_ERROR,
        "json": json.dumps({"message": f"token {HOSTILE_VALUE}"}),
        "json-ascii-of-docker": json.dumps(DOCKER_ERROR),
        "json-utf8-of-docker": json.dumps(DOCKER_ERROR, ensure_ascii=False),
        "repr": repr(HOSTILE_VALUE),
        "ascii": ascii(HOSTILE_VALUE),
        "repr-of-docker": repr(DOCKER_ERROR),
        "go-ascii": "\"HF_TOKEN=ab\\x00c\\\"d\\\\e\\u00e9\\u2603\\x1bz-canary\"",
    }
    for name, text in forms.items():
        scrubbed = redactor.scrub_text(text)
        assert MASK in scrubbed, name
        assert "canary" not in scrubbed, (name, scrubbed)
    assert redactor.values_count == 1  # forms are not counted as separate secrets


def test_go_quoting_matches_go_for_every_class_of_character() -> None:
    """Go's %q keeps printable runes and escapes the rest; %+q escapes all non-ASCII too."""
    assert go_quoted('a"\\\n\x00\x7f') == 'a\\"\\\\\\n\\x00\\x7f'
    assert go_quoted("é") == "é"
    assert go_quoted("é", ascii_only=True) == "\\u00e9"
    assert go_quoted("\u200b") == "\\u200b"  # a format character: not printable
    assert go_quoted("\U00010000") == "\U00010000"
    assert go_quoted("\U00010000", ascii_only=True) == "\\U00010000"
    assert go_quoted("\U000e0001") == "\\U000e0001"  # a language tag: not printable


def test_json_forms_are_the_inside_of_the_quotes() -> None:
    assert _json_inner("abc", True) == "abc"
    assert _json_inner("é\n", False) == "é\\n"
    assert _json_inner("é\n", True) == "\\u00e9\\n"


def test_a_secret_inside_a_longer_one_does_not_leave_the_longer_one_s_ends() -> None:
    """Longest first: masking the short secret first would leave the long one's ends."""
    redactor = Redactor()
    redactor.register("zzzzzzzz")
    redactor.register("azzzzzzzzb")
    assert redactor.scrub_text("x azzzzzzzzb y zzzzzzzz") == f"x {MASK} y {MASK}"


def test_url_credentials_go_from_every_url_in_a_text() -> None:
    """One policy for every URL shown anywhere: ``user:password@`` and a lone ``user@``
    disappear, the rest of the URL and of the text stays."""
    text = ("fetch https://bot:s3cret@git.example/specs.git failed; rtsp://admin@cam:554/live "
            "and rtsps://u:p@h/x; mail me@example.org; plain http://host/a@b")
    assert redact_urls(text) == (
        "fetch https://git.example/specs.git failed; rtsp://cam:554/live and rtsps://h/x; "
        "mail me@example.org; plain http://host/a@b")
    assert redact_urls("git+ssh://git@host/repo") == "git+ssh://host/repo"
    assert redact_urls("no url here") == "no url here"
