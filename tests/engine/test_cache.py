"""``LRUCache`` keeps per-file results bounded by entry count and by the bytes ``sizeof`` reports,
evicting the least recently used first; the tests fill small caches by hand and check which keys
survive, the byte count after each step, ``put_if_room``'s refusals, and that threads together
keep the bounds."""

from __future__ import annotations

import threading

from tb_attn_plugin.engine.cache import LRUCache


def _keys(cache: LRUCache[bytes], tried: list[str]) -> list[str]:
    """The keys of ``tried`` the cache still holds (``get`` refreshes them; callers only look)."""
    return [k for k in tried if cache.get(k) is not None]


def test_a_missing_key_is_none_and_a_stored_value_comes_back() -> None:
    cache: LRUCache[str] = LRUCache()
    assert cache.get("a") is None and len(cache) == 0 and cache.nbytes == 0
    cache.put(("/x/a.json", 10, 1.5), "parsed")
    assert cache.get(("/x/a.json", 10, 1.5)) == "parsed"
    # Another version of the same file (new mtime) is another key: nothing stale is served.
    assert cache.get(("/x/a.json", 10, 2.5)) is None
    assert len(cache) == 1 and cache.nbytes == 1  # the default sizeof counts one per entry


def test_the_entry_bound_evicts_the_least_recently_used() -> None:
    cache: LRUCache[str] = LRUCache(max_entries=3)
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get("a") == "A"  # a is now the newest: b is the oldest
    cache.put("d", "D")
    assert [k for k in "abcd" if cache.get(k) is not None] == ["a", "c", "d"]
    assert len(cache) == 3 and cache.nbytes == 3


def test_putting_an_existing_key_refreshes_it_and_replaces_its_size() -> None:
    cache: LRUCache[bytes] = LRUCache(max_entries=2, sizeof=len)
    cache.put("a", b"1234")
    cache.put("b", b"12")
    cache.put("a", b"123456")  # a replaced: 6 + 2 bytes, and a is now the newest
    assert cache.nbytes == 8 and len(cache) == 2
    cache.put("c", b"1")  # evicts b, the least recently used, not a
    assert cache.get("b") is None and cache.get("a") == b"123456"
    assert cache.nbytes == 6 + 1


def test_the_byte_bound_evicts_oldest_first_until_the_total_fits() -> None:
    cache: LRUCache[bytes] = LRUCache(max_entries=100, max_bytes=10, sizeof=len)
    cache.put("a", b"xxxx")  # 4
    cache.put("b", b"xxx")  # 7
    cache.put("c", b"xx")  # 9
    assert cache.nbytes == 9
    cache.put("d", b"xxxxxx")  # 15 > 10: a goes (11), then b goes (8)
    assert _keys(cache, ["a", "b", "c", "d"]) == ["c", "d"]
    assert cache.nbytes == 2 + 6 and len(cache) == 2


def test_a_value_of_exactly_the_byte_bound_is_kept_alone() -> None:
    cache: LRUCache[bytes] = LRUCache(max_bytes=10, sizeof=len)
    cache.put("a", b"x")
    cache.put("b", b"y" * 10)  # 1 + 10 > 10: a goes, b fits by itself
    assert _keys(cache, ["a", "b"]) == ["b"] and cache.nbytes == 10


def test_a_value_larger_than_the_byte_bound_is_not_kept_and_evicts_nothing_else() -> None:
    cache: LRUCache[bytes] = LRUCache(max_bytes=10, sizeof=len)
    cache.put("a", b"xxx")
    cache.put("big", b"x" * 11)
    assert cache.get("big") is None
    assert _keys(cache, ["a"]) == ["a"] and cache.nbytes == 3


def test_an_oversized_new_version_drops_the_old_value_of_its_key() -> None:
    """Replacing a key with a value too large to keep leaves no value under that key: the old
    one describes what the caller just replaced, so serving it would be stale."""
    cache: LRUCache[bytes] = LRUCache(max_bytes=10, sizeof=len)
    cache.put("a", b"xxx")
    cache.put("b", b"yy")
    cache.put("a", b"z" * 11)
    assert cache.get("a") is None and cache.get("b") == b"yy"
    assert len(cache) == 1 and cache.nbytes == 2


def test_a_cache_of_no_entries_keeps_nothing() -> None:
    cache: LRUCache[str] = LRUCache(max_entries=0)
    cache.put("a", "A")
    assert cache.get("a") is None and len(cache) == 0 and cache.nbytes == 0
    assert cache.put_if_room("a", "A") is False


def test_put_if_room_stores_only_what_evicts_nothing() -> None:
    cache: LRUCache[bytes] = LRUCache(max_entries=3, max_bytes=10, sizeof=len)
    assert cache.put_if_room("a", b"xxxx") is True  # 4
    assert cache.put_if_room("b", b"xxxxxx") is True  # 4 + 6 = 10: exactly the bound
    assert cache.put_if_room("c", b"x") is False  # 11 > 10
    assert cache.put_if_room("a", b"x") is False  # already held: left as it is
    assert cache.get("a") == b"xxxx" and cache.nbytes == 10 and len(cache) == 2


def test_put_if_room_refuses_past_the_entry_bound() -> None:
    cache: LRUCache[bytes] = LRUCache(max_entries=2, max_bytes=1000, sizeof=len)
    assert cache.put_if_room("a", b"x") and cache.put_if_room("b", b"x")
    assert cache.put_if_room("c", b"x") is False
    assert _keys(cache, ["a", "b", "c"]) == ["a", "b"] and cache.nbytes == 2


def test_sizeof_is_called_with_the_value() -> None:
    seen: list[object] = []

    def sizeof(value: bytes) -> int:
        seen.append(value)
        return 3 * len(value)

    cache: LRUCache[bytes] = LRUCache(sizeof=sizeof)
    cache.put("a", b"ab")
    cache.put_if_room("b", b"abcd")
    assert seen == [b"ab", b"abcd"] and cache.nbytes == 3 * 2 + 3 * 4


def test_threads_together_keep_both_bounds_and_an_exact_byte_count() -> None:
    """Eight threads put, replace, get and put-if-room over shared keys: afterwards the entries
    and bytes are within the bounds and ``nbytes`` equals the sizes of what is held (an unlocked
    update would lose or double some of them)."""
    cache: LRUCache[bytes] = LRUCache(max_entries=20, max_bytes=200, sizeof=len)
    keys = [f"k{i}" for i in range(40)]
    start = threading.Barrier(8)

    def work(seed: int) -> None:
        start.wait()
        for i in range(2000):
            key = keys[(seed * 7 + i) % len(keys)]
            value = b"x" * ((seed + i) % 17)
            if i % 3 == 0:
                cache.put_if_room(key, value)
            else:
                cache.put(key, value)
            cache.get(keys[(seed + i * 5) % len(keys)])

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = {k: v for k in keys if (v := cache.get(k)) is not None}
    assert len(held) == len(cache) <= 20
    assert cache.nbytes == sum(len(v) for v in held.values()) <= 200
