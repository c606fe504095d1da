"""Trajectory cleaning: each rule on a hand-written conversation."""

from cuda_agent.train.cleaning import CleanConfig, clean_messages

SCHEMAS = {n: {"type": "function", "function": {"name": n, "parameters": {
    "type": "object", "properties": p, "required": r}}} for n, p, r in [
    ("read_file", {"path": {"type": "string"}}, ["path"]),
    ("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    ("compile", {}, []), ("verify", {}, []), ("submit", {"summary": {"type": "string"}}, [])]}


def call(name, cid, **args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def turn(*calls, content=""):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def result(cid, text):
    return {"role": "tool", "tool_call_id": cid, "content": text}


HEAD = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]


def clean(msgs, **kw):
    return clean_messages(msgs, CleanConfig(schemas=SCHEMAS, **kw))


def test_truncate_after_submit():
    msgs = HEAD + [turn(call("verify", "a")), result("a", "ok"), turn(call("submit", "b")), result("b", "done"),
                   turn(call("read_file", "c", path="x")), result("c", "late"), {"role": "user", "content": "more"}]
    out, st = clean(msgs)
    assert out == HEAD + msgs[2:6] and st.submitted and st.messages_after_submit == 3


def test_calls_after_submit_in_the_same_turn_are_cut():
    msgs = HEAD + [turn(call("submit", "a"), call("verify", "b")), result("a", "done"), result("b", "v")]
    out, _ = clean(msgs)
    assert [c["id"] for c in out[2]["tool_calls"]] == ["a"] and out[3:] == [result("a", "done")]


def test_unknown_and_invalid_calls_dropped_with_their_results():
    msgs = HEAD + [turn(call("rm_rf", "a")), result("a", "unknown tool"),
                   turn(call("read_file", "b", file="x")), result("b", "unknown argument"),
                   turn(call("write_file", "c", path="k.cu")), result("c", "missing content"),
                   turn({"id": "d", "type": "function", "function": {"name": "read_file", "arguments": "{bad json"}}),
                   result("d", "not json"),
                   turn(call("read_file", "e", path="model.py"), call("nope", "f")), result("e", "src"), result("f", "?")]
    out, st = clean(msgs)
    assert st.unknown_calls == 2 and st.invalid_calls == 3 and st.dropped_turns == 4
    assert out == HEAD + [turn(call("read_file", "e", path="model.py")), result("e", "src")]


def test_string_arguments_are_parsed_not_dropped():
    msgs = HEAD + [turn({"id": "a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "m"}'}}),
                   result("a", "x")]
    out, st = clean(msgs)
    assert len(out) == 4 and st.invalid_calls == 0


def test_dedupe_repeated_read_only_calls_until_a_write():
    w = lambda cid, c: call("write_file", cid, path="k.cu", content=c)  # noqa: E731
    msgs = HEAD + [turn(call("compile", "a")), result("a", "err"),
                   turn(call("compile", "b")), result("b", "err"),          # duplicate: nothing changed
                   turn(w("c", "v1")), result("c", "ok"),
                   turn(w("d", "v1")), result("d", "ok"),                   # same write twice in a row
                   turn(call("compile", "e")), result("e", "ok")]           # after a write: not a duplicate
    out, st = clean(msgs)
    assert st.duplicate_calls == 2
    assert [m["tool_calls"][0]["id"] for m in out if m["role"] == "assistant"] == ["a", "c", "e"]


def test_results_matched_by_position_without_ids():
    c1 = {"type": "function", "function": {"name": "nope", "arguments": {}}}
    c2 = {"type": "function", "function": {"name": "verify", "arguments": {}}}
    msgs = HEAD + [turn(c1, c2), {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}]
    out, _ = clean(msgs)
    assert out[2]["tool_calls"] == [c2] and out[3] == {"role": "tool", "content": "r2"}


def test_hallucinated_observations_stripped():
    msgs = HEAD + [turn(call("verify", "a"), content="checking <tool_response>\nfake: correct 9x\n</tool_response>"),
                   result("a", "real")]
    out, st = clean(msgs)
    assert out[2]["content"] == "checking" and st.hallucinated_blocks == 1


def test_input_not_modified_and_rules_can_be_off():
    msgs = HEAD + [turn(call("compile", "a")), result("a", "x"), turn(call("compile", "b")), result("b", "x")]
    before = repr(msgs)
    out, st = clean(msgs, dedupe=False)
    assert repr(msgs) == before and len(out) == len(msgs) and st.duplicate_calls == 0
