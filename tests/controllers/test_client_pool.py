"""One HTTP client per service per pass: lent by the pass's pool, closed when the pass ends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import cast

from controllers.clients.http_api import ClientPool
from controllers.clients.rtvi_client import RtviClient
from controllers.clients.vst_client import VstClient


def test_one_client_per_service_and_url_shared_across_threads() -> None:
    pool = ClientPool()
    with ThreadPoolExecutor(8) as threads:
        got = list(threads.map(lambda _: pool.get(RtviClient, "http://127.0.0.1:1"), range(32)))
    assert len({id(c) for c in got}) == 1
    assert pool.get(VstClient, "http://127.0.0.1:1") is not cast(object, got[0])
    assert pool.get(RtviClient, "http://127.0.0.1:2") is not got[0]
    pool.close()


def test_a_lent_client_outlives_its_users_close_until_the_pass_ends() -> None:
    pool = ClientPool()
    rtvi = pool.get(RtviClient, "http://127.0.0.1:1")
    rtvi.close()  # what code written for its own client does when done
    assert not rtvi._http.is_closed
    pool.close()
    assert rtvi._http.is_closed
    assert pool.get(RtviClient, "http://127.0.0.1:1") is not rtvi  # a new pass, a new client


def test_a_client_of_its_own_closes_as_before() -> None:
    own = RtviClient("http://127.0.0.1:1")
    own.close()
    assert own._http.is_closed
