"""autotune's predictions for scripts/hf_infer_bench.py's cases, beside what was measured.

Each case is priced as its user states it: `autotune evaluate --runtime transformers --workload serve`
with the case's batch (all of it one micro-batch, as `generate` runs it), prompt and output lengths,
on one GPU of the datasheet cluster and, with --profile, of a measured profile.
Usage: python hf_infer_report.py CASES.json --cluster dgx-h200 [--profile P.json] [--measured M.jsonl] --out OUT.json
"""
import argparse
import json
import statistics
import subprocess
import sys


def _evaluate(case: dict, cluster: str, profile: str | None, workload: str) -> dict:
    cmd = [sys.executable, "-m", "autotune", "evaluate", "--model", case["config"], "--gpus", "1", "--cluster", cluster,
           "--runtime", "transformers", "--workload", workload, "--batch", str(case["batch"]),
           "--micro-batch", str(case["batch"]), "--prompt-len", str(case["prompt_len"]),
           "--output-len", str(case["output_len"]), "--json"]
    if profile:
        cmd += ["--profile", profile]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-400:])
    return json.loads(done.stdout)


def predict(case: dict, cluster: str, profile: str | None) -> dict:
    try:
        e = _evaluate(case, cluster, profile, "serve")
        decode = _evaluate(case, cluster, profile, "decode")
    except RuntimeError as err:
        return {"error": str(err)}
    return {"ttft_s": e["ttft_s"], "tpot_s": e["tpot_s"], "peak_memory_bytes": e["peak_memory_bytes_per_gpu"],
            # a decode step's kernel time, the host's issue time apart (beside the profiler's busy time)
            "decode_gpu_s": decode["breakdown"]["compute_s"] / decode["decode_steps"]}


def _error_pct(predicted: float, measured: float) -> float:
    return round(100.0 * (predicted - measured) / measured, 1)


def compare(row: dict, predicted: dict) -> dict:
    out = {}
    for key, measured_key in (("ttft_s", "ttft_s"), ("tpot_s", "tpot_s"), ("peak_memory_bytes", "peak_allocated_bytes")):
        if key in predicted and row.get(measured_key):
            out[key] = _error_pct(predicted[key], row[measured_key])
    if "decode_gpu_s" in predicted and row.get("decode_step_kernels"):
        out["decode_gpu_s"] = _error_pct(predicted["decode_gpu_s"], row["decode_step_kernels"]["busy_us"] / 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("--cluster", default="dgx-h200")
    ap.add_argument("--profile")
    ap.add_argument("--measured")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cases = json.load(open(args.cases))
    measured = {}
    if args.measured:
        rows = [json.loads(line) for line in open(args.measured)]
        measured = {r["name"]: r for r in rows if "name" in r}
    report = []
    for case in cases:
        entry = {"name": case["name"], "datasheet": predict(case, args.cluster, None)}
        if args.profile:
            entry["profile"] = predict(case, args.cluster, args.profile)
        row = measured.get(case["name"])
        if row and "error" not in row:
            entry["measured"] = {k: row.get(k) for k in ("ttft_s", "tpot_s", "peak_allocated_bytes")}
            entry["measured"]["decode_busy_s"] = row["decode_step_kernels"]["busy_us"] / 1e6
            entry["error_pct"] = {k: compare(row, entry[k]) for k in ("datasheet", "profile") if k in entry}
        report.append(entry)
        print(json.dumps(entry), flush=True)
    summary = {}
    for source in ("datasheet", "profile"):
        for metric in ("ttft_s", "tpot_s", "decode_gpu_s", "peak_memory_bytes"):
            errs = [abs(e["error_pct"][source][metric]) for e in report if metric in e.get("error_pct", {}).get(source, {})]
            if errs:
                summary[f"{source} {metric}"] = {"n": len(errs), "mae_pct": round(statistics.mean(errs), 1),
                                                 "worst_pct": max(errs)}
    json.dump({"cluster": args.cluster, "profile": args.profile, "cases": report, "summary": summary},
              open(args.out, "w"), indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
