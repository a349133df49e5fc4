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
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # as vLLM 0.11.0 / transformers
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
