"""How well a template's size predicts vLLM 0.11.0's per-request parse of it (docs/serving.md, tmplx44).

For every template timed in autotune/data/chat_template_parse.toml (the intake's Llama 3 one included) this prints
its characters, its jinja2 lexer tokens (whitespace tokens left out; the environment vLLM's
resolve_chat_template_kwargs builds, trim_blocks and lstrip_blocks), the timed parse and the parse per character
and per token, then each measure's spread and the leave-one-out error of predicting a template's parse from the
median rate of the others. Run: python scripts/chat_template_parse_spread.py (jinja2 from this venv; no vLLM).
"""

from __future__ import annotations

import statistics
import tomllib
from importlib import resources
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = Path(__file__).resolve().parents[1] / "tests" / "data" / "chat_templates"


def timed() -> list[tuple[str, int, int, float]]:
    """(name, characters, lexer tokens, parse seconds) of every timed template."""
    data = tomllib.loads(resources.files("autotune.data").joinpath("chat_template_parse.toml").read_text())
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    rows = [("llama3_intake_bench", "llama3_intake_bench.jinja", data["intake_template_parse_s"]["value"])]
    rows += [(name, t["file"], t["parse_s"]["value"]) for name, t in data["templates"].items()]
    out = []
    for name, file, parse_s in rows:
        text = (TEMPLATES / file).read_text(encoding="utf-8")
        tokens = sum(1 for tok in env.lex(text) if tok[1] != "whitespace")
        out.append((name, len(text), tokens, parse_s))
    return out


def spread(label: str, rates: list[float], sizes: list[int], parses: list[float]) -> None:
    errors = []
    for i, (size, parse_s) in enumerate(zip(sizes, parses)):
        others = statistics.median(r for j, r in enumerate(rates) if j != i)
        errors.append(100 * (others * size - parse_s) / parse_s)
    mean = statistics.mean(rates)
    print(f"per {label}: {min(rates) * 1e6:.2f}-{max(rates) * 1e6:.2f} us (CV {100 * statistics.stdev(rates) / mean:.0f}%); "
          f"leave-one-out error mean |{statistics.mean(abs(e) for e in errors):.0f}|%, "
          f"range {min(errors):+.0f}% to {max(errors):+.0f}%")


def main() -> None:
    rows = timed()
    for name, chars, tokens, parse_s in sorted(rows, key=lambda r: r[3] / r[1]):
        print(f"{name:26s} {chars:5d} characters {tokens:4d} tokens {parse_s * 1e3:7.3f} ms "
              f"{parse_s / chars * 1e6:5.2f} us/character {parse_s / tokens * 1e6:5.1f} us/token")
    parses = [r[3] for r in rows]
    spread("character", [r[3] / r[1] for r in rows], [r[1] for r in rows], parses)
    spread("token", [r[3] / r[2] for r in rows], [r[2] for r in rows], parses)


if __name__ == "__main__":
    main()
