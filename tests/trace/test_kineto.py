"""The Kineto adapter (``trace/kineto.py``): how torch.profiler spells categories and fields. The
strict decoder (``decode_events``) and the lenient one (``lenient_event``) are run on hand-written
events, and scope names on CPU ops checked to become annotations; the category table of every
schema generation is in ``test_decode.py``.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest

from tb_attn_plugin.trace.coerce import EMPTY_RAW
from tb_attn_plugin.trace.kineto import (
    CATEGORY_KIND,
    DEVICE_KINDS,
    NO_ARGS,
    UNSET,
    Kind,
    ModuleLabel,
    WireArgs,
    WireEvent,
    decode_events,
    kind_of,
    lenient_event,
    module_label,
    scopes_as_annotations,
)


def test_unset_is_int64s_minimum_which_no_value_read_can_be() -> None:
    assert UNSET == -(2**63) == np.iinfo(np.int64).min
    assert NO_ARGS == WireArgs() and NO_ARGS.ext == NO_ARGS.corr == NO_ARGS.nbytes == UNSET


@pytest.mark.parametrize("category", ["CPU_OP", "KERNEL", "Gpu_Memcpy", "CUDA_RUNTIME", "Python_Function"])
def test_categories_are_read_in_any_case(category: str) -> None:
    assert kind_of(category) == CATEGORY_KIND[category.lower()] != Kind.OTHER


def test_device_kinds_are_the_kinds_on_the_device_timeline() -> None:
    assert sorted(DEVICE_KINDS) == sorted(int(k) for k in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION))
    assert int(Kind.RUNTIME) not in DEVICE_KINDS  # a launch runs on the host thread


# -- scopes --------------------------------------------------------------------------------
def test_a_scope_written_as_a_cpu_op_is_an_annotation() -> None:
    names = ["aten::mm", "tbattn.v1/L0/softmax", "ProfilerStep#1"]
    name = np.array([0, 1, 1, 2, 1], np.int32)
    kind = np.array([Kind.CPU_OP, Kind.CPU_OP, Kind.KERNEL, Kind.ANNOTATION, Kind.ANNOTATION], np.int8)
    got = scopes_as_annotations(names, name, kind)
    # Only event 1 changes: a scope name on a CPU op. A kernel of that name stays a kernel.
    assert got.dtype == np.int8
    assert got.tolist() == [Kind.CPU_OP, Kind.ANNOTATION, Kind.KERNEL, Kind.ANNOTATION, Kind.ANNOTATION]
    assert kind.tolist()[1] == Kind.CPU_OP  # the input is not changed


def test_without_scope_names_the_kinds_are_returned_as_they_are() -> None:
    kind = np.array([Kind.CPU_OP, Kind.KERNEL], np.int8)
    assert scopes_as_annotations(["aten::mm", "tbattn"], np.array([0, 1], np.int32), kind) is kind
    empty = np.empty(0, np.int8)
    assert scopes_as_annotations([], np.empty(0, np.int32), empty) is empty


# -- the strict decoder --------------------------------------------------------------------
def test_the_strict_decoder_reads_both_spellings_and_skips_other_fields() -> None:
    (new, old, bare, null) = decode_events(
        b'[{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": "7", "ts": 1.5, "dur": 2,'
        b' "args": {"External id": 3, "correlation": 9, "Input Dims": [[2,3]], "Ev Idx": 4}, "id": {"a": [1]}},'
        b' {"ph": "X", "args": {"external id": 5, "Sequence number": 6}},'
        b' {"ph": "i"},'
        b' {"ph": "X", "args": null, "cat": null}]')
    assert (new.ph, new.name, new.cat, new.pid, new.tid, new.ts, new.dur) == ("X", "aten::mm", "cpu_op", 1, "7", 1.5, 2)
    assert new.args is not None and (new.args.ext, new.args.ext_lc, new.args.corr) == (3, UNSET, 9)
    assert bytes(new.args.dims) == b"[[2,3]]" and bytes(new.args.types) == b""  # raw, as written
    assert old.args is not None and (old.args.ext, old.args.ext_lc, old.args.seq) == (UNSET, 5, 6)
    # Absent fields take the defaults; "args": null is None, an absent "args" is NO_ARGS.
    assert (bare.name, bare.cat, bare.pid, bare.dur, bare.args) == ("", None, 0, 0.0, NO_ARGS)
    assert math.isnan(bare.ts)
    assert null.args is None and null.cat is None


def test_a_null_argument_is_none_and_an_absent_one_unset() -> None:
    (event,) = decode_events(b'[{"ph": "X", "args": {"External id": null}}]')
    assert event.args is not None and event.args.ext is None and event.args.ext_lc == UNSET


@pytest.mark.parametrize(("text", "error"), [
    (b'[{"ts": NaN}]', msgspec.DecodeError),  # not JSON to msgspec
    (b'[{"ts": "1"}]', msgspec.ValidationError),
    (b'[{"pid": true}]', msgspec.ValidationError),
    (b'[{"pid": 1.5}]', msgspec.ValidationError),
    (b'[{"args": {"Bytes": "4"}}]', msgspec.ValidationError),
    (b'{"ph": "X"}', msgspec.ValidationError),  # not an array
    (b'[{"ph": "X"', msgspec.DecodeError),
])
def test_the_strict_decoder_refuses_values_of_the_wrong_type(text: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode_events(text)


def test_integers_past_int64_pass_the_strict_decoder_for_the_columns_to_refuse() -> None:
    # msgspec builds any int; the column builder's int64 conversion raises OverflowError, and
    # the batch then takes the lenient path, where int_or_none drops it.
    (event,) = decode_events(b'[{"args": {"correlation": 18446744073709551616}}]')
    assert event.args is not None and event.args.corr == 2**64
    with pytest.raises(OverflowError):
        np.fromiter([event.args.corr], np.int64, 1)


# -- the lenient path -----------------------------------------------------------------------
def test_a_well_typed_event_reads_the_same_leniently() -> None:
    text = (b'[{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": "t", "ts": 1.5, "dur": 2.0,'
            b' "args": {"External id": 3, "external id": 4, "correlation": 5, "Sequence number": 6,'
            b' "Input Dims": [[2, 3], [3]], "Input type": ["float", "float"], "Concrete Inputs": ["", ""],'
            b' "Bytes": 7, "Total Allocated": 8, "Device Type": 1, "Device Id": 0}}]')
    (strict,) = decode_events(text)
    obj = msgspec.json.decode(text)[0]
    lenient = lenient_event(obj)
    # Raw fields compare by their bytes: json.dumps writes "[[2, 3], [3]]" as the text above does.
    assert lenient == strict


def test_lenient_fields_of_the_wrong_type_are_coerced() -> None:
    event = lenient_event({"ph": 5, "name": None, "cat": 7, "pid": True, "tid": 2.5, "ts": "12", "dur": None})
    assert event == WireEvent(ph="5", name="None", cat=None, pid="True", tid="2.5", ts=12.0, dur=0.0, args=NO_ARGS)


def test_lenient_times_that_are_no_numbers_are_nan_or_zero() -> None:
    event = lenient_event({"ph": "X", "ts": "soon", "dur": True})
    assert math.isnan(event.ts) and event.dur == 0.0  # a bool is no duration: the default
    assert math.isnan(lenient_event({"ph": "X", "ts": None}).ts)
    assert math.isnan(lenient_event({"ph": "X", "ts": 10**400}).ts)  # float() overflows


def test_lenient_arguments_out_of_range_or_null_are_unset() -> None:
    event = lenient_event({"ph": "X", "args": {"External id": "7", "correlation": 2**64, "Sequence number": None,
                                               "Bytes": 3.9, "Device Type": True, "Input Dims": [[1, 2]],
                                               "Input type": None}})
    args = event.args
    assert args is not None
    assert (args.ext, args.corr, args.seq, args.nbytes, args.dev_type) == (7, UNSET, UNSET, 3, 1)
    assert bytes(args.dims) == b"[[1, 2]]" and args.types is EMPTY_RAW


@pytest.mark.parametrize("args", [None, [1, 2], "x", 5])
def test_lenient_arguments_that_are_no_object_are_no_arguments(args: object) -> None:
    assert lenient_event({"ph": "X", "args": args}).args is NO_ARGS


# -- module labels -------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "label"), [
    # PyTorch Lightning's, around every submodule's forward: the class and the path.
    ("[pl][module]transformers.models.llama.modeling_llama.LlamaAttention: model.layers.3.self_attn",
     ModuleLabel("model.layers.3.self_attn", "LlamaAttention")),
    ("[pl][module]torch.nn.modules.linear.Linear: lm_head", ModuleLabel("lm_head", "Linear")),
    ("[pl][module]Foo: 0.attn", ModuleLabel("0.attn", "Foo")),  # any path Lightning writes
    ("[pl][module]torch.nn.modules.linear.Linear", None),  # no path
    ("[pl][module]a.B: my block", None),  # a path with whitespace is none
    ("[pl][profile][Strategy]SingleDeviceStrategy.training_step", None),  # Lightning's other labels
    ("[pl][profile]run_training_batch model.layers.3", None),
    # A module path in any other label: dotted, an identifier first, an integer part, two named parts.
    ("model.layers.3.self_attn", ModuleLabel("model.layers.3.self_attn", "")),
    ("## forward: encoder.layer.2.attention.self", ModuleLabel("encoder.layer.2.attention.self", "")),
    ("model.layers.3", ModuleLabel("model.layers.3", "")),
    ("block (model.h.11.attn) call", ModuleLabel("model.h.11.attn", "")),
    ("model.embed_tokens", None),  # no layer index: any dotted name could be this
    ("DistributedDataParallel.forward", None),
    ("Optimizer.step#SGD.step", None),
    ("3.attn", None),  # a number first: not a module path
    ("v1.2.3", None),  # one named part: a version
    ("layers.3", None),
    ("h.0.attn", ModuleLabel("h.0.attn", "")),
    ("copy model.layers.0 to model.layers.1", None),  # two paths: which?
    ("FSDP::pre_forward (model.layers.3)", None),  # FSDP's hooks, not the forward
    ("FSDP::pre_forward (model.layers.3.self_attn)", None),
    ("tbattn.v1/L0 model.layers.0.self_attn", None),  # our own scope
    ("ProfilerStep#3", None),
    ("", None),
])
def test_a_label_names_the_module_whose_forward_it_wraps(name: str, label: ModuleLabel | None) -> None:
    assert module_label(name) == label
