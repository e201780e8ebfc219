"""The dev catalog's model of Lakekeeper's short-term-credentials cache
(devstack/devcatalog/credential_cache.py): its serve window, single flight, errors never
cached, the off switch and the capacity."""

from __future__ import annotations

import threading
import time

import pytest

from devstack.devcatalog.credential_cache import (
    CacheKey,
    ShortTermCredentialsCache,
    serve_window,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def key(table: str = "ns.t", permissions: str = "Read", profile: dict | None = None) -> CacheKey:
    return CacheKey.of(
        f"s3://b/{table}/", permissions, "wh-1", table, profile or {"bucket": "b"}, "secret"
    )


def counting_loader():
    calls = []

    def load():
        calls.append(1)
        return f"keys-{len(calls)}"

    return load, calls


def test_the_serve_window_is_half_the_validity_at_most_an_hour():
    assert serve_window(900) == 450
    assert serve_window(20) == 10
    assert serve_window(43_200) == 3600


def test_a_set_is_served_for_half_its_validity_then_fetched_again():
    clock = Clock()
    cache = ShortTermCredentialsCache(clock=clock)
    load, calls = counting_loader()
    assert cache.get_or_load(key(), 900, load) == "keys-1"
    clock.now += 449
    assert cache.get_or_load(key(), 900, load) == "keys-1"
    clock.now += 1
    assert cache.get_or_load(key(), 900, load) == "keys-2"
    assert len(calls) == 2


def test_each_table_privilege_and_profile_has_its_own_set():
    cache = ShortTermCredentialsCache(clock=Clock())
    load, calls = counting_loader()
    served = {
        cache.get_or_load(key(), 900, load),
        cache.get_or_load(key(table="ns.u"), 900, load),
        cache.get_or_load(key(permissions="ReadWriteDelete"), 900, load),
        cache.get_or_load(
            key(profile={"bucket": "b", "sts-token-validity-seconds": 900}), 900, load
        ),
    }
    assert len(served) == len(calls) == 4
    assert CacheKey.of("l", "Read", "w", "t", {}, "one") != CacheKey.of(
        "l", "Read", "w", "t", {}, "two"
    )


def test_a_failed_fetch_is_not_cached():
    cache = ShortTermCredentialsCache(clock=Clock())

    def failing():
        raise RuntimeError("STS refused")

    with pytest.raises(RuntimeError, match="STS refused"):
        cache.get_or_load(key(), 900, failing)
    load, calls = counting_loader()
    assert cache.get_or_load(key(), 900, load) == "keys-1"
    assert len(calls) == 1


def test_concurrent_misses_for_one_key_fetch_once():
    cache = ShortTermCredentialsCache()
    calls = []
    started = threading.Event()

    def slow_load():
        calls.append(1)
        started.set()
        time.sleep(0.2)
        return "keys"

    results = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get_or_load(key(), 900, slow_load)))
        for _ in range(5)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == ["keys"] * 5
    assert len(calls) == 1


def test_switched_off_every_load_fetches():
    cache = ShortTermCredentialsCache(enabled=False)
    load, calls = counting_loader()
    cache.get_or_load(key(), 900, load)
    cache.get_or_load(key(), 900, load)
    assert len(calls) == 2


def test_past_its_capacity_the_entry_closest_to_its_end_goes():
    clock = Clock()
    cache = ShortTermCredentialsCache(capacity=2, clock=clock)
    load, calls = counting_loader()
    cache.get_or_load(key("ns.a"), 100, load)  # served until +50
    cache.get_or_load(key("ns.b"), 900, load)
    cache.get_or_load(key("ns.c"), 900, load)
    assert len(cache) == 2
    cache.get_or_load(key("ns.b"), 900, load)
    assert len(calls) == 3  # b still cached
    cache.get_or_load(key("ns.a"), 100, load)
    assert len(calls) == 4  # a was the one to go
