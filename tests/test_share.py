"""sandbox/share.py on the CPU (sets travel by value there; the CUDA IPC half is checked on the H200 by
benchmarks/ipc_probe.py and the GPU suite)."""
import io

import torch

from cuda_agent.sandbox import share


def _through_a_reply(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return torch.load(io.BytesIO(buf.getvalue()), weights_only=True)  # as the evaluator reads replies


def test_a_reused_set_is_the_same_tensors_with_new_values():
    ex, imp = share.Exporter(torch.device("cpu")), share.Importer()
    first = imp.open_set("t", _through_a_reply(ex.share("t", [torch.ones(3), 5])))
    again = imp.open_set("t", _through_a_reply(ex.share("t", [torch.full((3,), 2.0), 6], reuse=True)), reuse=True)
    assert again[0] is first[0] and torch.equal(again[0], torch.full((3,), 2.0)) and again[1] == 6


def test_a_set_of_another_shape_or_dtype_is_never_written_into_old_buffers():
    ex, imp = share.Exporter(torch.device("cpu")), share.Importer()
    first = imp.open_set("t", ex.share("t", [torch.ones(3)]))
    old = ex.sets["t"][0]
    again = imp.open_set("t", ex.share("t", [torch.ones(4)], reuse=True), reuse=True)
    assert ex.sets["t"][0] is not old and again[0] is not first[0] and again[0].shape == (4,)
    again = imp.open_set("t", ex.share("t", [torch.ones(4, dtype=torch.float64)], reuse=True), reuse=True)
    assert again[0].dtype == torch.float64


def test_outputs_are_copied_into_harness_memory_before_they_are_shared():
    out = (torch.ones(2), [torch.zeros(3), 1.5])
    keep = []
    tree = _through_a_reply(share.export_tree(out, keep=keep))
    back = share.open_tree(tree)
    assert len(keep) == 2 and keep[0] is not out[0] and keep[0].data_ptr() != out[0].data_ptr()
    assert torch.equal(back[0], out[0]) and torch.equal(back[1][0], out[1][0]) and back[1][1] == 1.5
    out[0].fill_(7.0)  # the candidate changing its own output afterwards does not change what is judged
    assert torch.equal(keep[0], torch.ones(2))


def test_every_torch_dtype_has_a_name_a_descriptor_can_carry():
    for d in (torch.float8_e4m3fn, torch.uint16, torch.complex32, torch.bfloat16, torch.bool):
        assert share._DTYPES[str(d).removeprefix("torch.")] is d


def test_an_output_the_reference_cannot_read_is_the_candidates_failure():
    """The reference worker's judge step: a descriptor it cannot open (forged, or of a kind it cannot
    rebuild) comes back as 'unreadable', which the evaluator turns into the candidate's runtime_error."""
    import types

    from cuda_agent.sandbox.worker import Worker

    w = Worker(conn=types.SimpleNamespace(send_bytes=None))  # no pipe: op_judge is called directly
    w.exporter = share.Exporter(torch.device("cpu"))
    w.refs["trial"] = torch.ones(3)
    forged = {"tensor": {"cuda": True, "size": [3], "stride": [1], "offset": 0, "dtype": "no_such_dtype"}}
    r = w.op_judge({"key": "trial", "output": forged, "precision": "fp32"})
    assert set(r) == {"unreadable"} and r["unreadable"].startswith("KeyError")
    w.refs["trial"] = torch.ones(3)
    r = w.op_judge({"key": "trial", "output": {"tensor": {"cuda": False, "value": torch.ones(3)}}, "precision": "fp32"})
    assert r["comparison"]["ok"] is True and r["input_mutated"] is False
