"""Every cache of the package in one place: bounded, emptied together, and reported.

Each cache is a `Cache`: a dictionary with a bound on its entries (and, where it holds device memory,
on the bytes its values hold), emptied by `clear()` (all of them, as `onlinesoftmax.reload()` does) and
listed by `report()`:

    >>> from onlinesoftmax.runtime import cache
    >>> cache.report()          # [{'name': 'plans', 'entries': 3, 'max_entries': 4096, 'bytes': 0, ...}, ...]
    >>> cache.clear()           # every plan, fast path, compiled module and device answer forgotten

Two kinds, by how hot the lookup is:
- order="lru" (plans, compiled modules): a hit moves the entry to the back; past a bound the least
  recently used entries go first.
- order="fifo" (the public functions' fast paths, a lookup per call): `get` is the dictionary's own
  (no bookkeeping on a hit); past the bound the oldest entries go first.

Threads: a dictionary lookup is atomic in CPython; everything that changes a cache (put, an LRU hit's
move, clear) holds the cache's lock, so two threads never evict the same entry or lose a count.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

CACHES: dict[str, "Cache"] = {}


class Cache:
    def __init__(self, name: str, max_entries: int, *, order: str = "lru", max_bytes: int | None = None,
                 nbytes=None, about: str = ""):
        if order not in ("lru", "fifo"):
            raise ValueError(f"cache order must be 'lru' or 'fifo', got {order!r}")
        if name in CACHES:
            raise ValueError(f"a cache named {name!r} exists already")
        self.name, self.max_entries, self.max_bytes, self.order, self.about = name, max_entries, max_bytes, order, about
        self._nbytes = nbytes or (lambda value: 0)      # bytes of device memory a value holds
        self._data: OrderedDict = OrderedDict()
        self.bytes = 0
        self._lock = threading.RLock()
        if order == "fifo":
            self.get = self._data.get                      # the hot path: a plain dictionary lookup
        CACHES[name] = self

    def get(self, key, default=None):
        with self._lock:
            value = self._data.get(key, default)
            if value is not default:
                self._data.move_to_end(key)
            return value

    def put(self, key, value):
        """Store value under key and return it; entries past the bounds go, oldest (or least used) first."""
        with self._lock:
            if key in self._data:
                self.bytes -= self._nbytes(self._data.pop(key))
            self._data[key] = value
            self.bytes += self._nbytes(value)
            while self._data and (len(self._data) > self.max_entries
                                  or (self.max_bytes is not None and self.bytes > self.max_bytes and len(self._data) > 1)):
                _, gone = self._data.popitem(last=False)
                self.bytes -= self._nbytes(gone)
            return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.bytes = 0

    def __contains__(self, key) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def __getitem__(self, key):
        return self._data[key]

    def __setitem__(self, key, value):
        self.put(key, value)

    def values(self):
        return self._data.values()

    def summary(self) -> dict:
        return {"name": self.name, "entries": len(self._data), "max_entries": self.max_entries,
                "bytes": self.bytes, "max_bytes": self.max_bytes, "order": self.order, "about": self.about}


def clear() -> None:
    """Empty every cache (plans and the kernels they hold, fast paths, device answers)."""
    for one in CACHES.values():
        one.clear()


def report() -> list[dict]:
    """One line per cache: its entries and bytes against its bounds."""
    return [one.summary() for one in CACHES.values()]
