"""FastXML on Dask against local threads, measured in one run.

    python scripts/bench_dask.py [--points 100000] [--labels 10000] [--trees 20]
        [--rounds 2] [--out results/dask.md]

Synthetic data from make_synthetic.py (100k points, 10k labels, 100k
features by default) in work/dask/. In each round the four commands run one
after another, on a machine doing nothing else:

    xml-train DATA M -t 20 -T 1              (local, one thread)
    xml-train DATA M -t 20 -T 2              (local, two threads)
    xml-train DATA M -t 20 --dask local:1    (a LocalCluster of 1 worker process)
    xml-train DATA M -t 20 --dask local:2    (2 worker processes)

Wall time is the whole command (reading the data, starting the cluster,
shipping the data, writing the trees). The four model folders are compared
byte for byte.

Then one run through the API on a LocalCluster of 2 workers records each tree
task's compute time (Dask's task stream) and the bytes shipped: the training
rows and the model's parameters once per worker, and each tree back to the
submitting process (the size of their pickles, which is what Dask sends).
From these the makespan on W workers is
simulated: the submitting process sends the data to the workers one after
another over 1 Gbit/s (125 MB/s), each worker starts when its copy has
arrived, tasks go in order to the worker free first (as Dask's scheduler
does with equal tasks), and each tree costs its bytes at 125 MB/s to come
back. The simulation is run for the measured trees and for 100 trees (the
measured durations repeated): more workers than trees cannot help.
"""
import argparse
import shutil
import sys
from pathlib import Path

import benchlib

HERE = Path(__file__).resolve().parent
BANDWIDTH = 125e6        # bytes/s: 1 Gbit/s


def makespan(durations, tree_bytes, data_bytes, workers):
    """Simulated wall time of the tasks on `workers` workers (see the module doc)."""
    import heapq
    free = [((i + 1) * data_bytes / BANDWIDTH, i) for i in range(workers)]
    heapq.heapify(free)
    end = 0.0
    for d, b in zip(durations, tree_bytes):
        t, w = heapq.heappop(free)
        done = t + d
        end = max(end, done + b / BANDWIDTH)
        heapq.heappush(free, (done, w))
    return end


def task_profile(data, trees):
    """Per-tree compute seconds and bytes, from a LocalCluster of 2 workers."""
    import pickle
    import distributed
    from xmlkit import FastXML, cluster
    from xmlkit.io import read_dataset
    X, Y = read_dataset(data)
    model = FastXML(n_trees=trees)
    Xr, Yr = model.start_fit(X, Y)
    with cluster.connect("local:2") as client, distributed.get_task_stream(client) as ts:
        ex = cluster.DaskExecutor(client)
        grown = dict(ex.grow_trees(model, Xr, Yr, list(range(trees))))
    compute = []
    for rec in ts.data:
        if rec["key"].startswith("_grow_tree"):
            for ss in rec["startstops"]:
                if ss["action"] == "compute":
                    compute.append(ss["stop"] - ss["start"])
    def sizeof(obj):            # what Dask ships: the pickle (protocol 5)
        return len(pickle.dumps(obj, protocol=5))
    tree_bytes = [sizeof(grown[t]) for t in sorted(grown)]
    data_bytes = sizeof((Xr, Yr)) + sizeof(cluster._worker_copy(model))
    return compute, tree_bytes, data_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--labels", type=int, default=10_000)
    ap.add_argument("--features", type=int, default=100_000)
    ap.add_argument("--trees", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "dask.md")
    ap.add_argument("--work", type=Path, default=HERE / "work" / "dask")
    a = ap.parse_args()
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    prefix = work / f"syn_{a.points}_{a.labels}"
    data = Path(f"{prefix}_train.txt")
    if not data.exists():
        benchlib.run_rss([sys.executable, HERE / "make_synthetic.py", prefix, "--points",
                          a.points, "--labels", a.labels, "--features", a.features,
                          "--test-points", 1000])
    runs = {"-T 1": ["-T", "1"], "-T 2": ["-T", "2"],
            "--dask local:1": ["--dask", "local:1"], "--dask local:2": ["--dask", "local:2"]}
    times = {k: [] for k in runs}
    for r in range(a.rounds):
        for name, extra in runs.items():
            folder = work / f"model_{name.replace(' ', '').replace(':', '').replace('-', '')}"
            shutil.rmtree(folder, ignore_errors=True)
            res = benchlib.run_rss([benchlib.BIN / "xml-train", data, folder, "-t", a.trees,
                                    *extra, "-q"])
            times[name].append(res["wall"])
            print(f"round {r + 1}: {name}: {res['wall']:.1f} s", file=sys.stderr)
    folders = [work / f"model_{n.replace(' ', '').replace(':', '').replace('-', '')}"
               for n in runs]
    names = sorted(p.name for p in folders[0].iterdir() if not p.name.startswith("."))
    identical = all((f / n).read_bytes() == (folders[0] / n).read_bytes()
                    for f in folders[1:] for n in names)
    compute, tree_bytes, data_bytes = task_profile(data, a.trees)
    med = {k: benchlib.median(v) for k, v in times.items()}
    lines = [f"FastXML, {a.trees} trees, on synthetic data (make_synthetic.py: "
             f"{a.points:,} points, {a.labels:,} labels, {a.features:,} features), 2 cores; "
             f"whole-command wall time, median of {a.rounds} round(s), the four commands "
             "alternating. Made by `python scripts/bench_dask.py`.", "",
             "| command | wall s | vs -T 1 |", "|---|---|---|"]
    for k in runs:
        lines.append(f"| `xml-train DATA M -t {a.trees} {k}` | {med[k]:.1f} | "
                     f"{med['-T 1'] / med[k]:.2f}x |")
    lines += ["", f"`--dask local:2` is {med['--dask local:1'] / med['--dask local:2']:.2f}x "
                  f"faster than `--dask local:1`; `--dask local:1` takes "
                  f"{100 * (med['--dask local:1'] / med['-T 1'] - 1):+.1f}% of the time of "
                  "`-T 1`. The four model folders are "
                  + ("identical, byte for byte." if identical else "NOT identical."), ""]
    mean = sum(compute) / max(1, len(compute))
    lines += [f"Tasks (LocalCluster of 2 workers, Dask's task stream): {len(compute)} tree "
              f"tasks, compute {min(compute):.1f} / {mean:.1f} / {max(compute):.1f} s "
              f"(min / mean / max); shipped once per worker: {data_bytes / 1e6:.1f} MB "
              f"(training rows and model parameters); back per tree: "
              f"{sum(tree_bytes) / len(tree_bytes) / 1e6:.2f} MB on average.", "",
              "Simulated makespan (see the script's doc: data sent to the workers in turn at "
              "1 Gbit/s, tasks to the first free worker, trees back at 1 Gbit/s):", "",
              "| workers | " + f"{len(compute)} trees s | 100 trees s |", "|---|---|---|"]
    reps = -(-100 // len(compute))
    d100, b100 = (compute * reps)[:100], (tree_bytes * reps)[:100]
    for w in (1, 2, 8, 32, 128):
        lines.append(f"| {w} | {makespan(compute, tree_bytes, data_bytes, w):.1f} | "
                     f"{makespan(d100, b100, data_bytes, w):.1f} |")
    benchlib.save("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
