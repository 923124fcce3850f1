"""Graders for the exercises of the page "Decoding against a paged cache".

`check_gather_keys(fn)`: fn(pool, page_table_row, length) -> the sequence's keys in order, for a pool
(pages, page_size, d), one row of a page table (page numbers) and the sequence's length: an array
(length, d). Prints "passed" or the first problem (grading.py) and returns True or False.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.book.exercises.grading import Case, Tolerance, grade


def expected_keys(pool, row, length):
    keys = np.arange(length)
    return (np.asarray(pool)[np.asarray(row)[keys // pool.shape[1]], keys % pool.shape[1]],)


def gather_cases():   # (rows_arg None: a wrong key is not a row of the pool to quote)
    rng = np.random.default_rng(8)
    pool = rng.standard_normal((6, 4, 3))
    return [Case("pages [2, 0, 5] of 4 slots, 10 keys", (pool, np.array([2, 0, 5]), 10), None),
            Case("one page, 3 keys", (pool, np.array([4]), 3), None),
            Case("a page per key (pages of 1 slot), 5 keys", (rng.standard_normal((7, 1, 2)), np.array([6, 1, 3, 0, 2]), 5), None),
            Case("entries past the last page are not pages (-1)", (pool, np.array([1, 3, -1, -1]), 8), None),
            Case("an empty sequence", (pool, np.array([-1]), 0), None)]


def hidden_gather_cases(rng):
    page_size = int(rng.integers(1, 40))
    pages = int(rng.integers(3, 30))
    length = int(rng.integers(1, pages * page_size))
    row = rng.permutation(pages)[: -(-length // page_size)]
    return [Case(f"{length} keys in pages of {page_size}", (rng.standard_normal((pages, page_size, 4)), row, length),
                 None)]


def check_gather_keys(fn, quiet: bool = False) -> bool:
    """fn(pool, page_table_row, length) -> keys (length, d): key j from slot j % page_size of page
    page_table_row[j // page_size]."""
    return grade("gather_keys", fn, gather_cases(), expected_keys, ("keys",), Tolerance(rtol=0, atol=0),
                 quiet=quiet, hidden=hidden_gather_cases)


def gather_keys(pool, row, length):
    """The exercise's answer."""
    j = np.arange(length)
    return pool[row[j // pool.shape[1]], j % pool.shape[1]]
