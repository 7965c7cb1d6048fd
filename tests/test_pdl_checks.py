"""ircore.testing.pdl_problems: the PTX check providers run on kernels launched with PDL
(assert_pdl_chain_matches, its GPU half, runs in the providers' GPU tests)."""

import pytest

from ircore.testing import pdl_problems

SAFE = """
.visible .entry safe_kernel(
    .param .u64 p
)
{
    ld.param.u64 %rd1, [p];
    griddepcontrol.wait;
    ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1];
    griddepcontrol.launch_dependents;
    st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
    ret;
}
"""


def _kernel(name: str, body: str) -> str:
    return f".visible .entry {name}(\n    .param .u64 p\n)\n{{\n{body}\n}}\n"


def test_safe_kernels_pass() -> None:
    assert pdl_problems(SAFE) == {}
    assert pdl_problems(SAFE + _kernel("no_memory", "griddepcontrol.wait;\ngriddepcontrol.launch_dependents;")) == {}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("ld.global.u32 %r1, [%rd1];\ngriddepcontrol.launch_dependents;", "no griddepcontrol.wait"),
        (
            "ld.global.nc.u32 %r1, [%rd1];\ngriddepcontrol.wait;\ngriddepcontrol.launch_dependents;",
            "ld.global before griddepcontrol.wait",
        ),
        (
            "st.global.u32 [%rd1], %r1;\ngriddepcontrol.wait;\ngriddepcontrol.launch_dependents;",
            "st.global before griddepcontrol.wait",
        ),
        (
            "atom.global.add.u32 %r2, [%rd1], 1;\ngriddepcontrol.wait;\ngriddepcontrol.launch_dependents;",
            "atom.global before griddepcontrol.wait",
        ),
        ("griddepcontrol.wait;\nld.global.u32 %r1, [%rd1];", "no griddepcontrol.launch_dependents"),
    ],
)
def test_each_problem_is_named_per_kernel(body: str, problem: str) -> None:
    assert pdl_problems(SAFE + _kernel("bad_kernel", body)) == {"bad_kernel": problem}


def test_no_kernel_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"no \.entry"):
        pdl_problems(".version 8.0\n.target sm_90\n")
