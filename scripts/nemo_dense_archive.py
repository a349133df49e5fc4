"""Build tests/data/nemo_dense_archive.csv: the dense Llama 3 pre-training rows of Megatron-Bridge's
performance tables on DGX H100/B200/GB200 that tests/data/modern_runs.csv does not hold.

    git -C Megatron-Bridge show 067f987:docs/performance-summary.md > current.md
    git -C Megatron-Bridge show 067f987:docs/performance-summary-archive.md > archive.md
    python scripts/nemo_dense_archive.py current.md archive.md > tests/data/nemo_dense_archive.csv

Model shapes come from the modern_runs.csv row of the same model; the table gives the layout,
precision, batch and tokens/s/GPU (iteration time = GBS x sequence / GPUs / tokens/s/GPU). Tables
without a precision column (25.09) are skipped. FSDP > 0 (Megatron-FSDP) is written as ZeRO 3.
"""

import csv
import re
import sys

MODERN = "tests/data/modern_runs.csv"
GPU = {"DGX-H100": "H100-SXM5-80GB", "DGX-B200": "B200", "DGX-GB200": "GB200"}
PRECISION = {"BF16": "bf16", "FP8-CS": "fp8", "FP8": "fp8", "FP8-MX": "mxfp8", "MXFP8": "mxfp8", "NVFP4": "nvfp4"}


def model_key(name):
    return re.split(r"\s*[\(\[]", name)[0].strip().upper()


def layout_key(container, gpu, model, precision, cells):
    return (container, gpu, model, precision) + tuple(cells.get(k, "") for k in ("gpus", "global_batch", "micro_batch",
                                                                                 "tp", "pp", "cp", "vpp", "fsdp"))


def given_rows(base):
    """Layout keys of the dense NeMo rows modern_runs.csv already holds."""
    keys = set()
    for r in base:
        if r["id"].startswith("nemo-mb") and r["arch"] == "dense":
            container = re.search(r"container (\S+?),", r["source"]).group(1)
            fsdp = re.search(r"FSDP=(\d+)", r["confidence"])
            cells = dict(r, cp=r["cp"] or "1", fsdp=fsdp.group(1) if fsdp else "0")
            keys.add(layout_key(container, r["gpu"], model_key(r["model"]), r["precision"], cells))
    return keys


def table_rows(path):
    """(container, system, model, cells) of every pre-training table row of a performance summary."""
    container = system = model = header = None
    section = ""
    for line in open(path):
        if m := re.match(r"## ([0-9.]+) NeMo Container", line):
            container, system, model, header, section = m.group(1), None, None, None, ""
        elif (m := re.match(r"### (.+)", line)) and not line.startswith("####"):
            section = m.group(1)
        elif m := re.match(r"#### System: (\S+)", line):
            system = m.group(1)
        elif m := re.match(r"#### Model: (.+)", line):
            model = m.group(1).strip()
        elif line.startswith(("| System", "| Model")):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
        elif line.startswith("|") and not line.startswith("|--") and header and "Pre-Training" in section:
            cells = dict(zip(header, [c.strip() for c in line.strip().strip("|").split("|")]))
            yield container, cells.get("System", system), cells.get("Model", model), cells


def row_of(template, label, container, system, model, cells):
    precision = PRECISION.get(cells["Precision"].split("(")[0].strip().upper())
    if precision is None:
        return None
    number = lambda key: re.sub(r"\[.*|\(.*", "", cells[key]).strip()  # noqa: E731 (footnote marks)
    gpus, gbs, seq, tokens = int(cells["#-GPUs"]), int(cells["GBS"]), int(cells["Sequence Length"]), float(number("Tokens / sec / GPU"))
    tp, pp, cp = int(cells["TP"]), int(cells["PP"]), int(cells["CP"])
    fsdp = cells.get("FSDP", "0")
    row = dict(template, id="", source=f"NVIDIA-NeMo/Megatron-Bridge {label} @067f987, container {container}, {system}",
               model=model, seq=str(seq), global_batch=str(gbs), micro_batch=cells["MBS"], gpus=str(gpus), gpu=GPU[system],
               tp=str(tp), pp=str(pp), cp=str(cp), ep="1", vpp="" if cells["VP"] == "n/a" else cells["VP"],
               dp=str(gpus // (tp * pp * cp)), precision=precision, recompute="", zero="3" if fsdp not in ("0", "n/a", "") else "",
               reported_metric="tokens_per_s_per_gpu", reported_value=f"{tokens:g}", iter_s=f"{gbs * seq / gpus / tokens:.4g}",
               confidence=f"high (table row; Model TFLOP/s/GPU={number('Model TFLOP / sec / GPU')}; GA={cells.get('GA', '')}; "
                          f"FSDP={fsdp}; precision {cells['Precision']})")
    return row, layout_key(container, GPU[system], model_key(model), precision, dict(row, fsdp=fsdp))


def main(current, archive):
    base = list(csv.DictReader(open(MODERN)))
    templates = {}
    for r in base:
        if r["id"].startswith("nemo-mb") and r["arch"] == "dense":
            templates.setdefault(model_key(r["model"]), r)
    seen, out = given_rows(base), []
    for path, label in ((current, "docs/performance-summary.md"), (archive, "docs/performance-summary-archive.md")):
        for container, system, model, cells in table_rows(path):
            if system in GPU and model and model_key(model) in templates and "Precision" in cells:
                built = row_of(templates[model_key(model)], label, container, system, model, cells)
                if built and built[1] not in seen:
                    seen.add(built[1])
                    out.append(built[0])
    out.sort(key=lambda r: (r["gpu"], r["model"].lower(), r["precision"], r["source"]))
    writer = csv.DictWriter(sys.stdout, fieldnames=list(base[0]), lineterminator="\n")
    writer.writeheader()
    for i, row in enumerate(out, 1):
        writer.writerow(dict(row, id=f"nemo-dense-{i:03d}"))


if __name__ == "__main__":
    main(*sys.argv[1:3])
