"""CPU tier for suite `peers` (onlinesoftmax/bench/peers.py): the shapes it sweeps include what the
performance targets name (vocabularies 32000..262144 at batch 1, few long rows, odd sizes, tall short
rows) in fp32 and bf16; a peer that is not installed is a reason, not a crash; the ideal traffic it
divides by."""
from onlinesoftmax.bench import peers


def test_the_sweep_has_the_shapes_the_targets_name():
    shapes = set(peers.SHAPES)
    for vocab in (32000, 128256, 262144):
        assert {(1, vocab), (64, vocab), (2048, vocab)} <= shapes
    assert any(rows <= 16 and n >= 256000 for rows, n in shapes)          # few long rows
    assert any(n % 2 and rows % 2 for rows, n in shapes)                 # odd both ways
    assert (32768, 128) in shapes and set(peers.DTYPES) == {"float32", "bfloat16"}
    assert set(peers.QUICK_SHAPES) <= shapes


def test_a_missing_peer_is_a_reason():
    found = peers.third_party("softmax")
    assert set(found) == {"liger", "quack"}
    for fn, why in found.values():
        assert (fn is None) != (why is None)
        assert why is None or ":" in why                                # "ModuleNotFoundError: ..."
    assert peers.third_party("logsumexp") == {}
    assert set(peers.versions()) >= {"torch", "triton", "liger_kernel"}


def test_every_fast_row_names_the_kernel_auto_ran():
    import onlinesoftmax as osm

    for op in peers.OPS:
        for n_rows, n_cols in ((8, 1 << 20), (2048, 50257), (32768, 128)):
            assert peers.auto_choice(op, n_rows, n_cols, "bfloat16") in osm.REGISTRY
    assert peers.auto_choice("logsumexp", 8, 1 << 20, "bfloat16") == "logsumexp_03_split"
    assert peers.auto_choice("log_softmax", 4000, 4096, "float32") == "log_softmax_02_registers"
