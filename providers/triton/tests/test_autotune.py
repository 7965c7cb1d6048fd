"""The config cache around the autotune, with the GPU timer replaced by a fake one.

On CPU the candidates still really launch (in the interpreter) once each, as they do on a GPU
before timing; only the timing is faked, so the selection and caching logic is what is tested.
"""

import logging

import pytest
import torch
from _ref import assert_close, rms_norm_ref, silu_and_mul_ref
from conftest import GPU
from ircore_triton import kernels

pytestmark = pytest.mark.skipif(GPU is not None, reason="fakes the GPU timer; GPU runs tune for real")


@pytest.fixture
def fake_tuner(monkeypatch: pytest.MonkeyPatch):
    """Autotune on, with the timer returning the candidates' times in reverse order of preference
    (so the last candidate wins); records what was timed."""
    timed: list[int] = []

    def fake_time(launches, device):
        timed.append(len(launches))
        return [float(len(launches) - i) for i in range(len(launches))]

    monkeypatch.setattr(kernels, "_AUTOTUNE", True)
    monkeypatch.setattr(kernels, "_time_candidates", fake_time)
    monkeypatch.setattr(kernels, "_TUNE_MAX_ELEMENTS", 1 << 14)  # small scratch: interpreter speed
    saved = kernels.tuned_configs()
    kernels.clear_configs()
    yield timed
    kernels.clear_configs()
    kernels._CONFIGS.update(saved)


def test_tunes_once_per_bucket(fake_tuner: list[int]) -> None:
    x = torch.randn(3, 256)
    y = kernels.rms_norm(x, None, 1e-6)
    assert_close(y, rms_norm_ref(x, None, 1e-6), torch.float32)
    configs = kernels.tuned_configs()
    key = ("rms_norm", 256, torch.float32, kernels._bucket(3))
    assert list(configs) == [key]
    rows = kernels._bucket_rows(key[3], 256)
    cands = kernels._norm_candidates(256, rows, 4, kernels._sm_count(x.device))
    assert configs[key] == cands[-1]  # the fastest under the fake timer
    assert fake_tuner == [len(cands)]
    # what it measured is kept for bench_gpu.py --sweep (ms from the timer, us here)
    assert kernels._TUNE_TIMES[key] == [(c, (len(cands) - i) * 1e3) for i, c in enumerate(cands)]

    kernels.rms_norm(torch.randn(16, 256), None, 1e-6)  # same bucket (2..16 rows): no new tuning
    assert len(fake_tuner) == 1
    kernels.rms_norm(torch.randn(17, 256), None, 1e-6)  # next bucket
    assert len(fake_tuner) == 2
    kernels.rms_norm(torch.randn(3, 256, dtype=torch.float16), None, 1e-6)  # another dtype
    assert len(fake_tuner) == 3


def test_tuning_is_logged_at_debug(fake_tuner: list[int], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ircore.triton"):
        kernels.rms_norm(torch.randn(3, 256), None, 1e-6)
    (record,) = [r for r in caplog.records if r.name == "ircore.triton"]
    assert "tuned ('rms_norm', 256, torch.float32" in record.getMessage()
    assert "picked NormConfig(" in record.getMessage()


def test_fused_add_rms_norm_is_tuned_in_place(fake_tuner: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuner times fused_add_rms_norm as engines call it, in place (out of place it moves
    twice the memory, which at 1024x8192 leaves the H200's L2), for both forms of the call."""
    forms: list[tuple[bool, bool]] = []
    launch = kernels._launch_norm

    def record(cfg, x, r, y, ro, *rest):  # type: ignore[no-untyped-def]
        forms.append((y is x, ro is r))
        return launch(cfg, x, r, y, ro, *rest)

    monkeypatch.setattr(kernels, "_launch_norm", record)
    x, r, w = torch.randn(3, 256), torch.randn(3, 256), torch.randn(256)
    kernels.fused_add_rms_norm(x, r, w, 1e-6)  # out of place: tunes, then runs out of place
    assert len(fake_tuner) == 1
    assert set(forms[:-1]) == {(True, True)} and forms[-1] == (False, False)
    forms.clear()
    kernels.fused_add_rms_norm_(x, r, w, 1e-6)  # same key: no tuning
    assert forms == [(True, True)] and len(fake_tuner) == 1


def test_each_op_has_its_own_key(fake_tuner: list[int]) -> None:
    x, r = torch.randn(2, 128), torch.randn(2, 128)
    kernels.rms_norm(x, None, 1e-6)
    out, res = kernels.fused_add_rms_norm(x, r, None, 1e-6)
    assert torch.equal(res, x + r)
    assert_close(out, rms_norm_ref(x + r, None, 1e-6), torch.float32)
    y = kernels.silu_and_mul(x)
    assert_close(y, silu_and_mul_ref(x), torch.float32)
    ops = sorted(k[0] for k in kernels.tuned_configs())
    assert ops == ["fused_add_rms_norm", "rms_norm", "silu_and_mul"]


def test_failing_candidate_is_dropped(fake_tuner: list[int], monkeypatch: pytest.MonkeyPatch):
    real_launch = kernels._launch_norm

    def launch(cfg, *args):
        if cfg.num_warps == 4:
            raise RuntimeError("out of resources")
        return real_launch(cfg, *args)

    monkeypatch.setattr(kernels, "_launch_norm", launch)
    monkeypatch.setattr(
        kernels,
        "_norm_candidates",
        lambda *a: [kernels.NormConfig(1, 256, 4), kernels.NormConfig(1, 256, 2)],
    )
    x = torch.randn(2, 256)
    assert_close(kernels.rms_norm(x, None, 1e-6), rms_norm_ref(x, None, 1e-6), torch.float32)
    assert list(kernels.tuned_configs().values()) == [kernels.NormConfig(1, 256, 2)]


def test_no_tuning_while_capturing(fake_tuner: list[int], monkeypatch: pytest.MonkeyPatch):
    """Inside CUDA-graph capture the heuristic config runs and nothing is cached."""
    monkeypatch.setattr(kernels, "_capturing", lambda device: True)
    x = torch.randn(5, 200)
    assert_close(kernels.rms_norm(x, None, 1e-6), rms_norm_ref(x, None, 1e-6), torch.float32)
    assert_close(kernels.silu_and_mul(x), silu_and_mul_ref(x), torch.float32)
    assert kernels.tuned_configs() == {} and fake_tuner == []


def test_set_config_pins(fake_tuner: list[int]) -> None:
    pinned = kernels.NormConfig(2, 128, 4, max_programs=1)
    kernels.set_config("rms_norm", 100, torch.float32, 7, pinned)
    x = torch.randn(7, 100)
    assert_close(kernels.rms_norm(x, None, 1e-6), rms_norm_ref(x, None, 1e-6), torch.float32)
    assert fake_tuner == []


def test_bucket_table() -> None:
    b = kernels._bucket
    assert [b(t) for t in (1, 2, 16, 17, 128, 129, 1024, 1025, 8192, 8193, 1 << 40)] == [
        0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5,
    ]  # fmt: skip


def test_wide_rows_over_a_wave_also_try_eight_vectors_per_thread() -> None:
    """Rows of 8192+ elements over a wave or more: also half the warps of the fewest otherwise
    tried (eight 16-byte vectors per thread); never more than eight, never the chunked kernel
    there (bench_gpu.py --sweep on the H200: 1-5% slower at every such row)."""
    wide = kernels._norm_candidates(8192, 1024, 2, 132)
    assert kernels.NormConfig(1, 8192, 4) in wide and min(c.num_warps for c in wide) == 4
    fp32 = kernels._norm_candidates(8192, 1024, 4, 132)
    assert min(c.num_warps for c in fp32) == 8  # 2048 fp32 vectors: 8 warps x 8 vectors
    assert kernels.NormConfig(1, 16384, 8) in kernels._norm_candidates(16384, 1024, 2, 132)
    under_a_wave = kernels._norm_candidates(8192, 16, 2, 132)
    assert min(c.num_warps for c in under_a_wave) == 8
    narrower = kernels._norm_candidates(4096, 1024, 2, 132)
    assert min(c.num_warps for c in narrower) == 4  # four vectors per thread, as before
    for n, rows, es in ((8192, 1024, 2), (8192, 1024, 4), (16384, 1024, 2), (8192, 16, 2)):
        for c in kernels._norm_candidates(n, rows, es, 132):
            assert c.block_n >= n  # one pass: the row in registers
            assert c.block_m * c.block_n // (c.num_warps * 32 * (16 // es)) <= 8


def test_rows_wider_than_registers_take_chunks_of_at_most_four_vectors_per_thread() -> None:
    """Rows over MAX_ROW_BLOCK: the chunked kernel, in chunks of four 16-byte vectors per thread
    or fewer (an fp32 chunk of 8192 on 8 warps, eight vectors, spills on sm_90:
    tools/compile_check.py)."""
    n = kernels.MAX_ROW_BLOCK + 8
    for es in (2, 4):
        cands = kernels._norm_candidates(n, 1024, es, 132)
        assert cands and all(c.block_n < n for c in cands)
        assert all(c.block_n // (c.num_warps * 32 * (16 // es)) <= 4 for c in cands)
    assert kernels.NormConfig(1, 8192, 8) in kernels._norm_candidates(n, 1024, 2, 132)
    assert kernels.NormConfig(1, 8192, 8) not in kernels._norm_candidates(n, 1024, 4, 132)


def test_rows_not_in_whole_vectors_take_at_most_two_vectors_per_thread() -> None:
    """A row that is not a whole number of 16-byte vectors loads element by element: the
    candidates give each thread at most two vectors' worth (four spilled on sm_90)."""
    # (300 fp32 is 75 whole vectors; 8190 and 10001 bf16 are wide rows over a wave at 1024)
    for n, es in ((300, 2), (301, 4), (1001, 2), (8190, 2), (10001, 2)):
        vec = 16 // es
        for rows in (1, 16, 128, 1024):
            for c in kernels._norm_candidates(n, rows, es, 132):
                assert c.block_m * c.block_n <= c.num_warps * 32 * vec * 2
    aligned = kernels._norm_candidates(296, 1024, 2, 132)  # 37 vectors of 8: four allowed
    assert any(c.block_m * c.block_n > c.num_warps * 32 * 8 * 2 for c in aligned)


def test_act_gated_norm_and_rope_launches_are_tuned_per_key(fake_tuner: list[int]) -> None:
    """The gated activations, rms_norm_gated and rotary_pos_emb go through the same autotune:
    one key per (op, width, dtype, bucket), every candidate launched, the fastest (the last one
    under the fake timer) cached and run on the caller's tensors (checked against the reference);
    the heuristic launch is the first candidate."""
    from ircore_triton import act_kernels, impls, norm_kernels, rope_kernels

    import ircore

    x = torch.randn(3, 80)
    out = impls.swigluoai_and_mul(x, 1.702, 7.0)
    torch.testing.assert_close(out, ircore.get_op("swigluoai_and_mul").native(x, 1.702, 7.0), atol=1e-5, rtol=1e-5)
    key = ("swigluoai_and_mul", 40, torch.float32, kernels._bucket(3))
    cands = act_kernels._candidates(40, kernels._bucket_rows(key[3], 80), 4, True)
    assert cands[0] == act_kernels._heuristic(kernels._bucket_rows(key[3], 80), 40)
    assert kernels.tuned_configs()[key] == cands[-1] and cands[-1].split and fake_tuner == [len(cands)]
    impls.gelu_and_mul(x, "tanh")  # its own key, apart from gelu_and_mul's erf form
    assert ("gelu_tanh_and_mul", 40, torch.float32, key[3]) in kernels.tuned_configs()

    xg, g, w = torch.randn(3, 1024), torch.randn(3, 1024), 1 + 0.1 * torch.randn(1024)
    args = (xg, g, w, 1e-6, None, False, False)
    torch.testing.assert_close(impls.rms_norm_gated(*args), ircore.ops.rms_norm_gated.native(*args), atol=1e-5, rtol=1e-5)
    gated = kernels.tuned_configs()[("rms_norm_gated", (1024, 1024), torch.float32, key[3])]
    assert gated == norm_kernels._gated_candidates(1024, 4)[-1] == kernels.GatedNormConfig(8)

    b, s, hq, hk, d = 1, 1, 3, 2, 16  # one token: its bucket tunes on one (the interpreter's time)
    q = torch.randn(b, s, hq, d).transpose(1, 2)
    k = torch.randn(b, s, hk, d).transpose(1, 2)
    cos, sin = torch.randn(b, s, d), torch.randn(b, s, d)
    ref_args = (q.clone(), k.clone(), cos, sin, 1)
    impls.rotary_pos_emb(q, k, cos, sin, 1)
    torch.testing.assert_close((q, k), ircore.ops.rotary_pos_emb.native(*ref_args), atol=1e-5, rtol=1e-5)
    rope_key = ("rotary_pos_emb", (hq, hk, d), torch.float32, kernels._bucket(s))
    t = kernels._bucket_rows(rope_key[3], 2 * (hq + hk) * d)
    assert kernels.tuned_configs()[rope_key] == rope_kernels._hf_candidates(t, hq, hk, d // 2)[-1]
    assert kernels.tuned_configs()[rope_key].split_qk


def test_quant_splits_are_tuned_per_key(fake_tuner: list[int]) -> None:
    """The four split fp8 quant ops go through the same autotune, keyed by (op, (K, group, fp8
    type, scale layout), dtype, bucket): the fastest candidate (the last under the fake timer) is
    cached and gives the heuristic's bits; the norm forms take keys of their own
    (test_norm_quant_chunks_are_tuned_per_key); per-token scales without a norm are not tuned."""
    from ircore_triton import quant_kernels as qk

    e4 = torch.float8_e4m3fn
    x = torch.randn(3, 1100) * 10
    q, s = qk.dynamic_group_quant_fp8(x, [1, 128], True, True, e4, 4)
    key = ("dynamic_group_quant_fp8", qk.tune_hidden(1100, 128, e4, "tma4+ue8m0"), torch.float32, kernels._bucket(3))
    cands = qk.candidates(1100, 128, kernels._bucket_rows(key[3], 1100), 4)
    assert list(kernels.tuned_configs()) == [key] and fake_tuner == [len(cands)]
    pick = kernels.tuned_configs()[key]
    assert pick == cands[-1] and pick.block < qk.row_block(1100, 128)
    q0, s0 = qk.dynamic_group_quant_fp8(x, [1, 128], True, True, e4, 4, config=cands[0])
    assert torch.equal(q.view(torch.uint8), q0.view(torch.uint8)) and torch.equal(s, s0)
    qk.static_quant_fp8(x, torch.full((1100,), 0.1), e4)  # per channel: the static key (tuned with one scale)
    assert ("static_quant_fp8", (1100, 0, e4, "static"), torch.float32, key[3]) in kernels.tuned_configs()
    qk.rms_norm_group_quant_fp8(x, None, 1e-6, [1, 128], False, False, e4)
    assert ("rms_norm_group_quant_fp8", (1100, 128, e4, "row"), torch.float32, key[3]) in kernels.tuned_configs()
    qk.dynamic_quant_fp8(x, True, e4)
    assert len(kernels.tuned_configs()) == 3 and len(fake_tuner) == 3


def test_norm_quant_chunks_are_tuned_per_key(fake_tuner: list[int]) -> None:
    """The fused norm + quant ops tune between the whole row and chunked walks, keyed by (op, (K,
    group, fp8 type, scale layout), dtype, bucket), fused_add apart from the plain norm: the pick
    (the last candidate, a chunk, under the fake timer) runs on the caller's tensors within the
    op's tolerance; the per-tensor form (two whole-row launches) is not tuned."""
    from ircore_triton import quant_kernels as qk

    import ircore
    from ircore.testing import assert_close_to_reference

    e4 = torch.float8_e4m3fn
    x, r, w = torch.randn(3, 1100) * 10, torch.randn(3, 1100), 1 + 0.1 * torch.randn(1100)
    args = (x, r, w, 1e-6, True, e4, torch.full((1,), 0.05))
    out = qk.fused_add_rms_norm_dynamic_quant_fp8(*args)
    key = ("fused_add_rms_norm_dynamic_quant_fp8", (1100, 0, e4, "token"), torch.float32, kernels._bucket(3))
    cands = qk.norm_candidates(1100, None, 4)
    assert list(kernels.tuned_configs()) == [key] and fake_tuner == [len(cands)]
    assert kernels.tuned_configs()[key] == cands[-1] and cands[-1].block < qk.row_block(1100)
    assert_close_to_reference(ircore.get_op("fused_add_rms_norm_dynamic_quant_fp8"), out, args)
    qk.rms_norm_static_fp8_quant(x, w, 1e-6, torch.full((1,), 0.05), e4)
    assert ("rms_norm_static_fp8_quant", (1100, 0, e4, "static"), torch.float32, key[3]) in kernels.tuned_configs()
    qk.rms_norm_dynamic_quant_fp8(x, w, 1e-6, False, e4)  # per tensor
    assert len(kernels.tuned_configs()) == 2 and len(fake_tuner) == 2
