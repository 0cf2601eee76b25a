"""Rules across resources answer from indexes (issue 26: 31,200 Deployments once took 84 s of
CPU compared pair by pair): which port claims clash, and the bench that measures them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from specs.errors import SpecError
from specs.validate import parse_text
from tests.specs_factory import HOST, deployment

ROOT = Path(__file__).resolve().parents[2]


def _claims(*addresses: str, port: int = 18000) -> list[str]:
    """The port refusals of Deployments d0, d1, ... publishing ``port`` on ``addresses``."""
    docs: list[dict[str, Any]] = [HOST]
    for i, address in enumerate(addresses):
        docs.append(deployment(f"d{i}", "img:dev", port, profile="exploration",
                               model={"preset": "cr3-nano-reasoner-fp8"}))
        docs[-1]["spec"]["port"]["address"] = address
    try:
        parse_text(yaml.safe_dump_all(docs, sort_keys=False), "specs/x.yaml")
    except SpecError as exc:
        return [f"{i.field} {i.message}" for i in exc.issues]
    return []


@pytest.mark.parametrize(("addresses", "clash"), [
    (("::ffff:127.0.0.1", "::"), "::ffff:127.0.0.1:18000"),
    (("127.0.0.1", "127.0.0.2"), None),
    (("127.0.0.1", "127.0.0.1"), "127.0.0.1:18000 on Host local is already published by "
                                 "Deployment d0"),
    (("127.0.0.1", "::ffff:127.0.0.1"), "127.0.0.1:18000"),  # one socket address to the kernel
    (("127.0.0.1", "0.0.0.0"), "127.0.0.1:18000"),
    (("0.0.0.0", "127.0.0.9"), "0.0.0.0:18000"),
    (("::1", "0.0.0.0"), "::1:18000"),  # any wildcard, as the Host's own check says
    (("::1", "::"), "::1:18000"),
    (("127.0.0.1", "127.0.0.2", "0.0.0.0"), "127.0.0.1:18000"),
])
def test_port_claims_clash_on_the_same_address_or_a_wildcard_of_its_family(
        addresses: tuple[str, ...], clash: str | None) -> None:
    found = _claims(*addresses)
    if clash is None:
        assert found == []
    else:
        last = len(addresses) - 1
        assert len(found) == 1, found
        assert found[0].startswith("spec.port.host port ")
        assert clash in found[0], found
        assert f"Deployment d{last}" not in found[0]


def test_many_claims_of_one_port_are_each_refused_once_and_printed_briefly() -> None:
    found = _claims(*["127.0.0.1"] * 300)
    assert len(found) == 21  # 20 of the 299 refusals, then how many more there are
    assert all("already published by Deployment d0" in f for f in found[:20])
    assert found[20] == "- 279 more issue(s) in this file not shown; fix the ones above first"


def test_many_broken_references_list_the_known_names_briefly() -> None:
    docs = [HOST] + [{"apiVersion": "rtvi.reconciler/v1", "kind": "StreamSet",
                      "metadata": {"name": f"s{i}"},
                      "spec": {"deployment": f"missing{i}",
                               "sources": [{"name": "a", "synthetic": {"colour": "RED"}}]}}
                     for i in range(50)]
    docs += [deployment(f"d{i:02d}", "img:dev", 18000 + i, profile="exploration",
                        model={"preset": "cr3-nano-reasoner-fp8"}) for i in range(30)]
    with pytest.raises(SpecError) as info:
        parse_text(yaml.safe_dump_all(docs, sort_keys=False), "specs/x.yaml")
    assert len(info.value.issues) == 21
    assert all(i.message.endswith("d00, d01, d02, d03, d04, d05, d06, d07, d08, d09 and 20 "
                                  "more)") for i in info.value.issues[:20])
    assert info.value.issues[20].message.startswith("30 more issue(s) in this file")


def test_the_validate_bench_prints_its_table() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "validate.py"),
                           "--resources", "300", "--files", "3", "--runs", "1"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "validate: 300 resources in 3 files, 1 runs each"
    assert any(line.startswith("load (baseline)") for line in lines)
    assert any(line.startswith("validate ") and line.endswith("judged from 10000 resources")
               for line in lines), lines
