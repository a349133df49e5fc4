"""The command line: JSON interface, one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from autotune.cli.main import main


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_evaluate_json(capsys):
    assert main(["evaluate", "--model", "gpt3-1.3b", "--gpus", "8", "--tp", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"fits", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_memory_bytes_per_gpu",
            "breakdown", "memory_breakdown"} <= set(data)


def test_evaluate_table(capsys):
    assert main(["evaluate", "--model", "large", "--gpus", "4"]) == 0
    assert "step time" in capsys.readouterr().out


def test_evaluate_states_every_default_it_assumed(capsys):
    """Issue 14 item 6: a micro-batch of 1 the user never chose is printed with the result."""
    assert main(["evaluate", "--model", "large", "--gpus", "8", "--tp", "2", "--zero", "1", "--json"]) == 0
    assumed = json.loads(capsys.readouterr().out)["assumed"]
    assert assumed["micro_batch"] == 1 and assumed["recompute"] == "none" and assumed["dp"] == 4
    assert assumed["sequence_parallel"] == "on" and assumed["global_batch"] > 0 and assumed["dtype"] == "bf16"
    assert "tp" not in assumed and "zero" not in assumed  # given, so not assumed
    assert main(["evaluate", "--model", "large", "--gpus", "8", "--micro-batch", "4"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("assumed")][0]
    assert "recompute none" in line and "micro-batch" not in line


@pytest.mark.parametrize("args, needle", [
    (["--model", "nosuch", "--gpus", "8"], "model"),
    (["--model", "large", "--gpus", "8", "--tp", "3"], "gpus"),
    (["--model", "large", "--gpus", "0"], "--gpus"),
    (["--model", "large", "--gpus", "8", "--dtype", "fp64"], "dtype"),
    (["--model", "large", "--gpus", "8", "--cluster", "nope"], "cluster"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    code, out, err = run_cli("evaluate", *args)
    assert code == 2, err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_evaluate_runtime_flags_change_what_they_say(capsys):
    def tp_comm_s(*flags):
        assert main(["evaluate", "--model", "llama3-70b", "--gpus", "64", "--cluster", "dgx-h100", "--tp", "8",
                     "--global-batch", "64", "--zero", "3", "--recompute", "full", "--runtime", "torch", "--json",
                     *flags]) == 0
        return json.loads(capsys.readouterr().out)["breakdown"]["tp_cp_comm_s"]
    plain, both, forward_only = tp_comm_s(), tp_comm_s("--overlap-tp-comm"), tp_comm_s("--async-tp")
    assert both < forward_only < plain  # async TP overlaps the forward pass only

    def zero3_step_s(*flags):
        assert main(["evaluate", "--model", "gpt3-1.3b", "--gpus", "64", "--cluster", "dgx-a100-80gb", "--zero", "3",
                     "--global-batch", "64", "--runtime", "deepspeed", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["step_time_s"]
    assert zero3_step_s("--param-gather-gbps", "5") > zero3_step_s()
    code, _, err = run_cli("evaluate", "--model", "large", "--gpus", "4", "--param-gather-gbps", "-1")
    assert code == 2 and "--param-gather-gbps" in err and err.count("\n") == 1
