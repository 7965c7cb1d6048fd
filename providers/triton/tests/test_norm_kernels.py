"""rms_norm_gated and layer_norm kernels against the ops' fp64 references (tiny shapes: they run
in Triton's interpreter without a GPU), over what differs inside the kernels."""

import pytest
import torch
import triton
from conftest import GPU
from ircore_triton import impls, kernels, norm_kernels
from ircore_triton.kernels import GatedNormConfig

import ircore
from ircore.testing import assert_close_to_reference

DEVICE = GPU or "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _randn(*shape: int, dtype: torch.dtype, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEVICE) * scale + shift).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm_before_gate", [False, True])
@pytest.mark.parametrize("round_normalized", [False, True])
@pytest.mark.parametrize("group_size", [None, 8, 24])  # the row, power-of-two groups, masked groups
def test_rms_norm_gated(group_size, round_normalized, norm_before_gate, dtype):
    x = _randn(3, 48, dtype=dtype)
    gate = _randn(3, 48, dtype=dtype, scale=2.0)
    w = _randn(48, dtype=dtype, scale=0.1, shift=1.0)
    args = (x, gate, w, 1e-6, group_size, norm_before_gate, round_normalized)
    assert impls.rms_norm_gated_supports(*args)
    out = impls.rms_norm_gated(*args)
    assert_close_to_reference(ircore.ops.rms_norm_gated, out, args)
    # the intermediate roundings as native's: within one unit of the last place of x's dtype (the
    # interpreter truncates the final cast to bf16)
    torch.testing.assert_close(out, ircore.ops.rms_norm_gated.native(*args), atol=1e-6, rtol=2**-7)


def test_rms_norm_gated_strided_rows_and_3d():
    x = _randn(2, 3, 80, dtype=torch.bfloat16)[..., :64]
    gate = _randn(2, 3, 64, dtype=torch.bfloat16)
    w = _randn(64, dtype=torch.bfloat16, shift=1.0)
    args = (x, gate, w, 1e-5, 16, False, True)
    assert_close_to_reference(ircore.ops.rms_norm_gated, impls.rms_norm_gated(*args), args)


#: The tuned launches other than the heuristic's: several groups (rows) per program, the weight
#: (and a trailing gate) loaded after the reduction, both (num_warps is the GPU's; the interpreter ignores it).
TILED = [
    GatedNormConfig(1, 2),
    GatedNormConfig(2, 4),
    GatedNormConfig(4, 8),
    GatedNormConfig(4, 1, True),
    GatedNormConfig(2, 4, True),
    GatedNormConfig(16, 2, True),  # two whole rows late, as offered for rows of 4096+
]


@pytest.mark.parametrize("config", TILED, ids=lambda c: f"m{c.block_m}{'-late' if c.late_loads else ''}")
@pytest.mark.parametrize("norm_before_gate", [False, True])
@pytest.mark.parametrize("round_normalized", [False, True])
@pytest.mark.parametrize("group_size", [None, 8, 24])
def test_rms_norm_gated_tiled_launches(group_size, round_normalized, norm_before_gate, config):
    """Each tuned launch form against the fp64 reference and native, and (in the interpreter) the
    heuristic launch's bits: 5 rows make 5, 30 and 10 groups, none a multiple of 4 or 8 (a ragged
    last tile), 5 not of 2 either."""
    x = _randn(5, 48, dtype=torch.bfloat16)
    gate = _randn(5, 48, dtype=torch.bfloat16, scale=2.0)
    w = _randn(48, dtype=torch.bfloat16, scale=0.1, shift=1.0)
    args = (x, gate, w, 1e-6, group_size, norm_before_gate, round_normalized)
    out = norm_kernels.rms_norm_gated(*args, config=config)
    assert_close_to_reference(ircore.ops.rms_norm_gated, out, args)
    torch.testing.assert_close(out, ircore.ops.rms_norm_gated.native(*args), atol=1e-6, rtol=2**-7)
    if not GPU:  # same operations per element; a GPU's reduction order follows the tile's layout
        heuristic = norm_kernels.gated_heuristic(triton.next_power_of_2(group_size or 48), 2)
        assert torch.equal(out, norm_kernels.rms_norm_gated(*args, config=heuristic))


@pytest.mark.parametrize("config", [TILED[1], TILED[4]], ids=["m4", "m4-late"])
def test_rms_norm_gated_tiled_strided_rows_3d_and_fp32(config):
    """Padded rows (row stride 80 for x, 64 for the gate) in a 3-D batch, groups of 16 crossing
    rows within a tile; and fp32 rows (one group each, 3 rows: a ragged tile of 4)."""
    x = _randn(2, 3, 80, dtype=torch.bfloat16)[..., :64]
    gate = _randn(2, 3, 64, dtype=torch.bfloat16, scale=2.0)
    w = _randn(64, dtype=torch.bfloat16, shift=1.0)
    for nbg in (False, True):
        args = (x, gate, w, 1e-5, 16, nbg, True)
        assert_close_to_reference(
            ircore.ops.rms_norm_gated, norm_kernels.rms_norm_gated(*args, config=config), args
        )
    xf, gf, wf = (
        _randn(3, 40, dtype=torch.float32),
        _randn(3, 40, dtype=torch.float32),
        _randn(40, dtype=torch.float32),
    )
    args = (xf, gf, wf, 1e-6, None, True, False)
    assert_close_to_reference(
        ircore.ops.rms_norm_gated, norm_kernels.rms_norm_gated(*args, config=config), args
    )


def test_rms_norm_gated_runs_a_pinned_tiled_config(monkeypatch: pytest.MonkeyPatch):
    """A config pinned with ``kernels.set_config`` (key: row width and group size, rows not
    groups) is the one the op launches, and its result is the op's."""
    seen: list[GatedNormConfig] = []
    run = norm_kernels._run_gated
    monkeypatch.setattr(norm_kernels, "_run_gated", lambda cfg, *a: (seen.append(cfg), run(cfg, *a))[1])
    saved = kernels.tuned_configs()
    try:
        x, gate = _randn(3, 32, dtype=torch.bfloat16), _randn(3, 32, dtype=torch.bfloat16)
        w = _randn(32, dtype=torch.bfloat16, shift=1.0)
        kernels.set_config("rms_norm_gated", (32, 8), torch.bfloat16, 3, GatedNormConfig(2, 8))
        args = (x, gate, w, 1e-6, 8, False, False)
        assert_close_to_reference(ircore.ops.rms_norm_gated, impls.rms_norm_gated(*args), args)
        assert seen == [GatedNormConfig(2, 8)]
    finally:
        kernels.clear_configs()
        kernels._CONFIGS.update(saved)


def test_rms_norm_gated_declines_what_it_does_not_run():
    x = _randn(2, 16, dtype=torch.bfloat16)
    g = _randn(2, 16, dtype=torch.bfloat16)
    assert not impls.rms_norm_gated_supports(x, g, torch.ones(16), 1e-6)  # fp32 weight
    assert not impls.rms_norm_gated_supports(x.t().contiguous().t(), g, g[0], 1e-6)  # last-dim stride 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm(affine, dtype):
    x = _randn(3, 40, dtype=dtype, shift=2.0)
    w = _randn(40, dtype=dtype, scale=0.1, shift=1.0) if affine in ("both", "weight") else None
    b = _randn(40, dtype=dtype, scale=0.1) if affine in ("both", "bias") else None
    args = (x, w, b, 1e-5)
    assert impls.layer_norm_supports(*args)
    assert_close_to_reference(ircore.ops.layer_norm, impls.layer_norm(*args), args)


def test_layer_norm_strided_rows_and_empty():
    x = _randn(4, 100, dtype=torch.float16)[:, :64]
    w, b = _randn(64, dtype=torch.float16, shift=1.0), _randn(64, dtype=torch.float16)
    assert_close_to_reference(ircore.ops.layer_norm, impls.layer_norm(x, w, b, 1e-5), (x, w, b, 1e-5))
    assert impls.layer_norm(x[:0], w, b, 1e-5).shape == (0, 64)
