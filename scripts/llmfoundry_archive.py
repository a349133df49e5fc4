"""Build tests/data/llmfoundry_archive.csv: the rows of llm-foundry's MPT training benchmark tables
that tests/data/modern_runs.csv does not hold (out-of-sample check of the FSDP regime).

    git -C llm-foundry show 8c8dd48:scripts/train/benchmarking/README.md > readme.md
    python scripts/llmfoundry_archive.py readme.md > tests/data/llmfoundry_archive.csv

Rows are numbered llmf-NNN in the README's order, as modern_runs.csv numbers the ones it holds;
the script checks that every row it shares with modern_runs.csv comes out cell for cell the same
(but for the ZeRO stage of SHARD_GRAD_OP, which modern_runs.csv has no row of: written as 2). Model
shapes are the MPT presets of modern_runs.csv (scripts/train/yamls/pretrain/mpt-*.yaml); iteration
time = global batch x sequence / (tokens/s/GPU x GPUs).
"""

import csv
import re
import sys

MODERN = "tests/data/modern_runs.csv"
GPU = {"h100_80gb": "H100-80GB", "a100_80gb": "A100-80GB", "a100_40gb": "A100-40GB"}
ZERO = {"FULL_SHARD": "3", "SHARD_GRAD_OP": "2"}
SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn", "ffn_act", "vocab")


def table_rows(path):
    """(section title, cells) of every benchmark table row, in the README's order."""
    section = header = None
    for line in open(path):
        if m := re.match(r"## (.+)", line):
            section, header = m.group(1).strip(), None
        elif line.startswith("|  Model"):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
        elif re.match(r"\|\s+[0-9]", line) and header:
            yield section, dict(zip(header, [c.strip() for c in line.strip().strip("|").split("|")]))


def csv_row(number, section, c, shapes):
    gpus, seq, gbs = int(c["# GPUs"]), int(c["SeqLen (T)"]), int(c["GlobalBatchSize"])
    tps = float(c["Throughput (T/s/GPU)"])
    size = c["Model"]
    row = {"id": f"llmf-{number:03d}",
           "source": f"mosaicml/llm-foundry scripts/train/benchmarking/README.md @8c8dd48 [{section}]",
           "model": f"MPT-{size} (NumParams={c['NumParams']})", "arch": "dense",
           **{k: shapes[size][k] for k in SHAPE},
           "num_experts": "", "top_k": "", "expert_ffn": "", "seq": str(seq), "global_batch": str(gbs),
           "micro_batch": c["MicroBatchSize"], "gpus": str(gpus), "gpu": GPU[c["GPU"]],
           "framework": "llm-foundry(composer FSDP1)", "tp": "1", "pp": "1", "dp": str(gpus), "cp": "1", "ep": "1",
           "vpp": "", "recompute": "full" if c["Activation Checkpointing"] == "True" else "none",
           "sequence_parallel": "no", "zero": ZERO[c["Sharding Strategy"]],
           "precision": "fp8" if "fp8" in c["Precision"] else "bf16", "compile": "",
           "reported_metric": "tokens_per_s_per_gpu", "reported_value": c["Throughput (T/s/GPU)"],
           "iter_s": f"{gbs * seq / (tps * gpus):.4g}",
           "confidence": (f"high (table row; also MFU={c['MFU']} HFU={c['HFU']} GradAccum={c['GradAccum']}; "
                          f"{c['Precision']}/{c['MP Mode']}; GPU form factor not stated)")}
    assert c["Activation CPUOffload"] == "False", row["id"]
    return row


def main(readme):
    base = list(csv.DictReader(open(MODERN)))
    given = {r["id"]: r for r in base if r["id"].startswith("llmf-")}
    shapes = {r["model"].split(" ")[0].removeprefix("MPT-"): r for r in given.values()}
    writer = csv.DictWriter(sys.stdout, fieldnames=list(base[0]), lineterminator="\n")
    writer.writeheader()
    for number, (section, cells) in enumerate(table_rows(readme), start=1):
        row = csv_row(number, section, cells, shapes)
        if row["id"] in given:
            old = given[row["id"]]
            diff = {k: (old[k], v) for k, v in row.items() if k != "iter_s" and old[k] != v}
            assert not diff and abs(float(old["iter_s"]) / float(row["iter_s"]) - 1) < 2e-3, (row["id"], diff)
            continue
        writer.writerow(row)


if __name__ == "__main__":
    main(sys.argv[1])
