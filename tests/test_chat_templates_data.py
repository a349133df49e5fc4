"""The checkpoints' chat templates kept for timing vLLM 0.11.0's per-request template pass
(tests/data/chat_templates/SOURCES.md): each is the text its source names, and renders its family's prompt."""

import re
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

DIR = Path(__file__).parent / "data" / "chat_templates"
USER = [{"role": "user", "content": "hi"}]


def _sources() -> dict[str, int]:
    """File name -> characters, from SOURCES.md's table."""
    rows = re.findall(r"^\| `([\w.]+\.jinja)` \| ([\d,]+) \|", (DIR / "SOURCES.md").read_text(), re.M)
    return {name: int(chars.replace(",", "")) for name, chars in rows}


def _render(name: str, messages: list[dict] = USER, **kwargs) -> str:
    # as vLLM 0.11.0's resolve_chat_template_kwargs / transformers build it (loopcontrols: Kimi's {% break %})
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    return env.from_string((DIR / name).read_text()).render(messages=messages, **kwargs)


def test_every_template_is_listed_with_its_length():
    listed = _sources()
    assert set(listed) == {p.name for p in DIR.glob("*.jinja")}
    for name, chars in listed.items():
        assert len((DIR / name).read_text()) == chars, name


def test_deepseek_r1_0528_renders_the_0528_prompt():
    bos = "<｜begin▁of▁sentence｜>"
    out = _render("deepseek_r1_0528.jinja", bos_token=bos, add_generation_prompt=True)
    assert out == bos + "<｜User｜>hi<｜Assistant｜>"  # no forced '<think>\n' (the 0528 card's change 2)
    sys_out = _render("deepseek_r1_0528.jinja", bos_token=bos, add_generation_prompt=True,
                      messages=[{"role": "system", "content": "S"}] + USER)
    assert sys_out.startswith(bos + "S<｜User｜>")  # the system prompt is kept (change 1)


@pytest.mark.parametrize(("name", "tail"), [("qwen3_next_80b.jinja", "<|im_start|>assistant\n<think>\n"),
                                            ("qwen3_0_6b.jinja", "<|im_start|>assistant\n")])
def test_qwen3_templates_render_chatml(name, tail):
    out = _render(name, add_generation_prompt=True)
    assert out == "<|im_start|>user\nhi<|im_end|>\n" + tail


LLAMA3_TURNS = ("<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n")


@pytest.mark.parametrize(("name", "expected"), [
    ("deepseek_r1.jinja", "<B><｜User｜>hi<｜Assistant｜><think>\n"),  # R1's forced '<think>\n' (February 2025)
    ("llama4.jinja", "<B><|header_start|>user<|header_end|>\n\nhi<|eot|><|header_start|>assistant<|header_end|>\n\n"),
    ("gemma3.jinja", "<B><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"),
    ("phi4.jinja", "<|im_start|>user<|im_sep|>hi<|im_end|><|im_start|>assistant<|im_sep|>"),
    ("kimi_k2_thinking.jinja", "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
                               "<|im_end|><|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>"),
    ("qwen3_coder_30b.jinja", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
])
def test_added_templates_render_their_family_prompt(name, expected):
    assert _render(name, bos_token="<B>", add_generation_prompt=True, strftime_now=lambda fmt: "01 Jan 2025") == expected


@pytest.mark.parametrize("name", ["llama3_1_instruct.jinja", "llama3_2_instruct.jinja", "llama3_2_vision.jinja"])
def test_llama3_templates_render_the_dated_system_turn(name):
    out = _render(name, bos_token="<B>", add_generation_prompt=True, strftime_now=lambda fmt: "26 Jul 2024")
    assert out == ("<B><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                   "Today Date: 26 Jul 2024\n\n<|eot_id|>" + LLAMA3_TURNS)
