"""vLLM 0.11.0's per-request chat-template parse in the API server, priced for the rows whose requests pay it.

vLLM 0.11.0 runs ``resolve_chat_template_kwargs`` on every chat request (entrypoints/chat_utils.py
``apply_hf_chat_template`` in the 0.11.0 wheel; added by vLLM PR #25794): a fresh jinja2 sandboxed environment
parses the checkpoint's whole template and ``jinja2.meta.find_undeclared_variables`` walks it, with nothing cached
(the content-format detection beside it is: ``_detect_content_format`` is an lru_cache, and transformers caches the
compiled template the render then uses, ``_compile_jinja_template``). It runs synchronously in ``_preprocess_chat``
before the request's first suspension (the tokenizer's executor), so a burst's parses all run on the API server's
loop before any request reaches the engine core. 0.10.2's wheel has no such pass; 0.11.1's, 0.11.2's, 0.12.0's and
0.13.0's cache it (``_cached_resolve_chat_template_kwargs``, an lru_cache over the template text). The ``/v1/completions`` endpoint
(``vllm bench serve``'s default ``--backend vllm``) renders no template, nor does gpt-oss's chat (harmony:
serving_chat.py ``_make_request_with_harmony``).

The priced intake (data/runtimes/vllm-0.8.toml ``frontend_intake_s``) was timed with Llama 3's short template; a
checkpoint's template adds its parse less that one's, all of it before the request's first suspension. The parse
seconds are the 0.11.0 wheel's own call timed on the development CPU (data/chat_template_parse.toml), as the intake
is; a checkpoint whose template was not timed pays no extra and says so.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from autotune.spec.runtime import Runtime
from autotune.spec.serving_engine import release_number

__all__ = ["TemplateParse", "template_parse", "chat_endpoint", "with_template_parse"]

# `vllm bench serve --backend openai-chat` / `--endpoint /v1/chat/completions`, as the rows' sources quote it
_CHAT = re.compile(r"openai-chat|/v1/chat/completions", re.IGNORECASE)
# gpt-oss's chat goes through openai-harmony, no jinja template (serving_chat.py use_harmony, the 0.11.0 wheel)
_HARMONY = re.compile(r"gpt-oss", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class TemplateParse:
    """One checkpoint family's chat template: which checkpoints ship it, its length, its parse's seconds."""

    name: str
    file: str  # the template as timed: tests/data/chat_templates/FILE
    hf_model_id: str  # a regular expression over the row's hf_model_id (case-insensitive, whole name)
    characters: int
    parse_s: float


@lru_cache(maxsize=1)
def _table() -> tuple[tuple[tuple[int, ...], ...], float, tuple[TemplateParse, ...]]:
    """(releases that parse every request, the intake's own template's parse seconds, the timed templates)."""
    data = tomllib.loads(resources.files("autotune.data").joinpath("chat_template_parse.toml").read_text())
    releases = tuple(release_number(v) for v in data["releases"]["value"])
    templates = tuple(TemplateParse(name=name, file=t["file"], hf_model_id=t["hf_model_id"], characters=t["characters"],
                                    parse_s=t["parse_s"]["value"]) for name, t in data["templates"].items())
    return releases, data["intake_template_parse_s"]["value"], templates


def template_parse(hf_model_id: str) -> TemplateParse | None:
    """The timed template the checkpoint ships, None where none was timed."""
    for t in _table()[2]:
        if re.fullmatch(t.hf_model_id, hf_model_id.strip(), re.IGNORECASE):
            return t
    return None


def chat_endpoint(row: dict) -> bool:
    """Whether the row's requests went to the chat endpoint (its source or notes quote the bench's chat backend)."""
    return bool(_CHAT.search(f"{row.get('source', '')} {row.get('notes', '')}"))


def with_template_parse(runtime: Runtime, row: dict) -> tuple[Runtime, tuple[str, ...]]:
    """``runtime`` whose API server parses the checkpoint's template on each request, where the row's release and
    endpoint do (vLLM 0.11.0, chat), with the note saying so; ``runtime`` as it was elsewhere."""
    engine = runtime.serving
    releases, intake_parse_s, _ = _table()
    if engine is None or engine.engine != "vllm" or not engine.frontend_intake_s:
        return runtime, ()
    if release_number(row.get("engine_version", "")) not in releases or not chat_endpoint(row):
        return runtime, ()
    hf_id = row.get("hf_model_id", "")
    if _HARMONY.search(hf_id):
        return runtime, ()
    found = template_parse(hf_id)
    if found is None:
        return runtime, (f"vLLM {row['engine_version']}'s per-request chat-template parse not priced ({hf_id}'s "
                         "template not timed)",)
    # the wheel's resolve_chat_template_kwargs on this template, less Llama 3's inside frontend_intake_s (data/chat_template_parse.toml)
    extra_s = max(found.parse_s - intake_parse_s, 0.0)
    intake_s = engine.frontend_intake_s + extra_s
    before = (engine.frontend_intake_s * engine.frontend_intake_before_send + extra_s) / intake_s
    serving = engine.with_changes(frontend_intake_s=intake_s, frontend_intake_before_send=before)
    return runtime.with_changes(serving=serving), (
        f"chat template {found.name} ({found.characters} characters) parsed on every request by vLLM "
        f"{row['engine_version']}: +{extra_s * 1e3:.2f} ms of API-server intake before the request is sent",)
