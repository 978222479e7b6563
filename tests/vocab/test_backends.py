"""The attention backends' names: ``Backend`` (a ``str`` enum with a label and a family) and the
groups built from families by ``of_family``. ``test_vocabulary`` checks that a member reads as its
string and the named groups' members; these tests check the families' partition, ``of_family``
itself, lookups of unknown names, and that a member survives the ways it leaves the process
(msgspec decoding, pickling)."""

from __future__ import annotations

import pickle
import re

import msgspec
import pytest

from tb_attn_plugin.vocab import backends
from tb_attn_plugin.vocab.backends import Backend, Family, of_family


def test_every_family_has_a_backend_and_each_backend_one_family() -> None:
    by_family = {f: of_family(f) for f in Family}
    assert all(by_family.values()), [f for f, bs in by_family.items() if not bs]
    assert sum(len(bs) for bs in by_family.values()) == len(Backend)  # no backend in two families
    assert frozenset().union(*by_family.values()) == frozenset(Backend)


def test_of_family_is_the_union_of_the_families_given() -> None:
    assert of_family() == frozenset()
    assert of_family(Family.LINEAR) == {Backend.LINEAR, Backend.PERFORMER, Backend.GATED_DELTANET}
    assert of_family(Family.QUANTIZED) == {Backend.INT8_QK}
    assert of_family(Family.SPARSE, Family.COMPILED) == {Backend.FLEX, Backend.COMPILED}
    assert of_family(Family.UNKNOWN) == {Backend.UNKNOWN}
    assert of_family(Family.FUSED, Family.FUSED) == of_family(Family.FUSED)
    assert isinstance(of_family(Family.LIBRARY), frozenset)


def test_the_named_groups_are_immutable_sets_of_members() -> None:
    for name in ("APPROXIMATE_BACKENDS", "DENSE_WORK_BACKENDS", "LINEAR_BACKENDS", "MODEL_LINEAR_BACKENDS",
                 "UNFUSED_BACKENDS"):
        group = getattr(backends, name)
        assert isinstance(group, frozenset) and group and all(type(b) is Backend for b in group), name


def test_a_library_quantized_kernel_is_not_counted_as_approximate() -> None:
    """SageAttention quantizes too, but it is a library's kernel (its family), not ours."""
    assert Backend.SAGE.family is Family.LIBRARY and Backend.SAGE not in backends.APPROXIMATE_BACKENDS
    assert Backend.INT8_QK in backends.APPROXIMATE_BACKENDS


def test_compiled_flex_skips_work_and_eager_flex_does_not() -> None:
    assert Backend.FLEX not in backends.DENSE_WORK_BACKENDS
    assert Backend.FLEX_EAGER in backends.DENSE_WORK_BACKENDS and Backend.FLEX_EAGER in backends.UNFUSED_BACKENDS


def test_names_are_distinct_lowercase_words_joined_by_dashes() -> None:
    assert len(Backend.__members__) == len(Backend)  # no name is an alias of another (a repeated value)
    bad = [b.value for b in Backend if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", b.value)]
    assert bad == []


def test_serving_backends_are_named_engine_then_implementation() -> None:
    serving = of_family(Family.SERVING)
    assert serving and all(b.value.split("-", 1)[0] in ("vllm", "sglang") and "-" in b.value for b in serving)
    assert all(b.family is Family.SERVING for b in Backend if b.value.startswith(("vllm-", "sglang-")))


def test_an_unknown_name_is_no_backend() -> None:
    with pytest.raises(ValueError, match="'nope' is not a valid Backend"):
        Backend("nope")
    with pytest.raises(ValueError):
        Backend("FLASH")  # the member's Python name, not its value
    with pytest.raises(ValueError):
        Family("FUSED")
    assert Family("fused") is Family.FUSED


def test_a_decoded_name_is_the_member_with_its_label() -> None:
    got = msgspec.json.decode(b'["flash", "vllm-paged"]', type=list[Backend])
    assert got == [Backend.FLASH, Backend.VLLM_PAGED] and got[0] is Backend.FLASH
    assert got[1].label == "vLLM's CUDA paged attention" and got[1].family is Family.SERVING
    with pytest.raises(msgspec.ValidationError, match="Invalid enum value 'nope'"):
        msgspec.json.decode(b'"nope"', type=Backend)


@pytest.mark.parametrize("backend", list(Backend), ids=lambda b: b.value)
def test_a_member_comes_back_as_itself(backend: Backend) -> None:
    """Through msgpack (how worker processes send summaries back) and pickle (``multiprocessing``,
    ``copy``): the member itself, with its label and family, not a copy that lost them."""
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(backend), type=Backend) is backend
    back = pickle.loads(pickle.dumps(backend))
    assert back is backend and back.label == backend.label and back.family is backend.family
