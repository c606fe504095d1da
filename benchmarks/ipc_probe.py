"""Does CUDA IPC through sandbox/share.py do what the GPU-resident evaluation needs? (issue 15)

    python3 benchmarks/ipc_probe.py --gib 1,6 --out ipc_probe.json

A trusted process (this one) draws a set on the GPU, shares it from its own pool, and a second process
(spawned fresh, like a worker) opens it, checks the values, writes into it, and shares an output back.
Reported: export/open times per size, whether a re-opened set has the same address, whether the second
process's write is seen, whether memory outside the pool (a private tensor) is reachable through the
handle's segment, and the host RSS of both processes (nothing task-sized should reach the host).
"""

from __future__ import annotations

import argparse
import io
import json
import time

import torch
import torch.multiprocessing as mp


def child(conn) -> None:
    from cuda_agent.sandbox import share
    from cuda_agent.sandbox.memory import peak_rss_mb

    torch.cuda.set_device(0)
    imp = share.Importer()
    report = {}
    while True:
        msg = conn.recv()
        if msg["op"] == "exit":
            conn.send(report)
            return
        t0 = time.perf_counter()
        (x,) = imp.open_set("set", msg["set"], msg["reuse"])
        torch.cuda.synchronize()
        open_s = time.perf_counter() - t0
        ok = bool((x[:1000] == msg["head"].cuda()).all())
        ptr = x.data_ptr()
        y = x * 2  # an output in the child's own memory
        torch.cuda.synchronize()
        x[0] = -7.0  # a write into the shared input: must be seen by the trusted side
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = share.export_tree((y,))
        export_s = time.perf_counter() - t0
        conn.send({"open_s": open_s, "values_ok": ok, "ptr": ptr, "out": out, "export_s": export_s,
                   "rss_mb": peak_rss_mb()})
        conn.recv()  # the parent has read the output
        del y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", default="1,6")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from cuda_agent.sandbox import share
    from cuda_agent.sandbox.memory import peak_rss_mb

    dev = torch.device("cuda", 0)
    ex = share.Exporter(dev)
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=child, args=(b,))
    p.start()
    private = torch.full((1 << 20,), 42.0, device=dev)  # outside the pool: must stay unreachable
    rows = []
    for i, gib in enumerate(float(g) for g in args.gib.split(",")):
        n = int(gib * (1 << 30) / 4)
        g = torch.Generator(device=dev).manual_seed(i)
        x = torch.rand(n, device=dev, generator=g)
        for reuse in (False, True):
            t0 = time.perf_counter()
            descs = ex.share("set", [x], reuse=reuse)
            share_s = time.perf_counter() - t0
            buf = io.BytesIO()  # as in a worker's reply: plain data that weights_only loading accepts
            torch.save(descs, buf)
            descs = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
            a.send({"op": "open", "set": descs, "reuse": reuse, "head": x[:1000].cpu()})
            r = a.recv()
            t0 = time.perf_counter()
            (y,) = share.open_tree(r["out"])
            out_ok = bool(torch.equal(y[1:1001], 2 * x[1:1001]))
            open_out_s = time.perf_counter() - t0
            seen = float(ex.sets["set"][0][0]) == -7.0
            a.send("done")
            del y
            rows.append({"gib": gib, "reuse": reuse, "share_s": round(share_s, 4), "open_s": round(r["open_s"], 4),
                         "export_out_s": round(r["export_s"], 4), "open_out_s": round(open_out_s, 4),
                         "values_ok": r["values_ok"], "output_ok": out_ok, "child_write_seen": seen,
                         "ptr": r["ptr"], "child_rss_mb": r["rss_mb"]})
            print(json.dumps(rows[-1]), flush=True)
        if rows[-1]["reuse"]:
            rows[-1]["same_address_on_reuse"] = rows[-1]["ptr"] == rows[-2]["ptr"]
        ex.sets.clear()
        del x
    a.send({"op": "exit"})
    a.recv()
    p.join()
    pool_segments = [s for s in torch.cuda.memory_snapshot() if s.get("segment_pool_id") == ex.pool.id]
    private_in_pool = any(s["address"] <= private.data_ptr() < s["address"] + s["total_size"] for s in pool_segments)
    result = {"rows": rows, "private_tensor_in_a_shared_segment": private_in_pool,
              "parent_rss_mb": peak_rss_mb(), "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    if args.out:
        open(args.out, "w").write(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
