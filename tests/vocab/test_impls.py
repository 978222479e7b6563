"""The runner's ``--impl`` names and what the analysis expects of each: one vocabulary, which the
runner validates by and the findings compare backends against."""

from __future__ import annotations

from tb_attn_plugin.vocab.backends import APPROXIMATE_BACKENDS, LINEAR_BACKENDS, Backend, Family
from tb_attn_plugin.vocab.impls import APPROXIMATE_IMPLS, GENERATE_IMPLS, IMPL_BACKENDS, IMPLS, LINEAR_IMPLS, Impl


def test_the_names_are_the_members_in_order() -> None:
    assert IMPLS == ("naive", "naive-inplace", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn",
                     "flex", "flex-eager", "linear-elu", "performer", "int8-qk")
    assert all(type(i) is str for i in IMPLS + APPROXIMATE_IMPLS + LINEAR_IMPLS + GENERATE_IMPLS)
    assert Impl("sdpa-math") == "sdpa-math" and Impl.SDPA_MATH in IMPLS


def test_the_groups_are_implementations() -> None:
    assert set(LINEAR_IMPLS) < set(APPROXIMATE_IMPLS) < set(IMPLS)
    assert set(APPROXIMATE_IMPLS) - set(LINEAR_IMPLS) == {"int8-qk"}
    # Generation runs the exact implementations that take a query shorter than its keys: all but flex's.
    assert set(GENERATE_IMPLS) == set(IMPLS) - set(APPROXIMATE_IMPLS) - {"flex", "flex-eager"}


def test_every_implementation_but_sdpa_names_the_backends_it_may_run_on() -> None:
    """"sdpa" lets PyTorch choose its kernel; every other implementation pins one."""
    assert set(IMPL_BACKENDS) == set(IMPLS) - {"sdpa"}
    assert IMPL_BACKENDS["sdpa-math"] == (Backend.SDPA_MATH,)  # a plain string looks a member's entry up
    for impl, expected in IMPL_BACKENDS.items():
        assert expected and all(b.family is not Family.UNKNOWN for b in expected), impl


def test_the_approximations_run_on_the_approximate_backends() -> None:
    """The runner's groups and the analysis's agree: an approximate implementation shows an
    approximate backend, a linear one a linear backend, an exact one neither."""
    for impl, expected in IMPL_BACKENDS.items():
        assert (set(expected) <= APPROXIMATE_BACKENDS) == (impl in APPROXIMATE_IMPLS), impl
        assert (set(expected) <= LINEAR_BACKENDS) == (impl in LINEAR_IMPLS), impl
        assert not set(expected) & APPROXIMATE_BACKENDS or impl in APPROXIMATE_IMPLS, impl
