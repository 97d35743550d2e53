"""Content fields through an agent turn: a processor sees ``experimental_attachments`` (and unknown content
keys), its rewrite is what the model gets and what is stored, and nothing else of the content is lost."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from tests._factories import RESOURCE, THREAD, open_memory, stored
from tests.codecs._content_strategies import PROPERTY, canonical, contents

from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.codecs import message_to_dict
from threadmind.models import ScriptedModel

INLINE = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
          "RU5ErkJggg==")
USER_ROW: dict[str, Any] = {
    "id": "u1",
    "role": "user",
    "createdAt": "2025-03-01T09:00:00.000Z",
    "content": {
        "format": 2,
        "parts": [{"type": "text", "text": "what is in the picture?", "createdAt": 1740819600000}],
        "content": "what is in the picture?",
        "experimental_attachments": [{"name": "pixel.png", "contentType": "image/png", "url": INLINE}],
        "annotations": [{"source": "upload-form"}],
        "clientState": {"draft": 3},
    },
}


class UploadAttachments:
    """The reference's "large attachments" processor: inline attachments are uploaded and their url rewritten."""

    id = "upload-attachments"

    def __init__(self) -> None:
        self.seen: list[list[Any]] = []
        self.seen_extra: list[dict[str, Any] | None] = []

    async def process_input(self, args: Any) -> list[Message]:
        out: list[Message] = []
        for message in args.messages:
            attachments = message.content.experimental_attachments
            if message.role == "user" and attachments:
                self.seen.append(copy.deepcopy(attachments))
                self.seen_extra.append(message.content.extra)
                uploaded = [{**a, "url": f"https://cdn.example/{a['name']}"} if a["url"].startswith("data:") else a
                            for a in attachments]
                content = msgspec.structs.replace(message.content, experimental_attachments=uploaded)
                message = msgspec.structs.replace(message, content=content)
            out.append(message)
        return out


async def _turn(memory: Memory, row: dict[str, Any], processor: object) -> ScriptedModel:
    model = ScriptedModel(["a single pixel"])
    agent = Agent("a", "describe images", model, memory=memory, input_processors=[processor])
    await agent.generate([row], thread_id=THREAD, resource_id=RESOURCE)
    return model


async def test_an_input_processor_rewrites_attachments_and_the_rewrite_is_stored(tmp_path: Path) -> None:
    upload = UploadAttachments()
    async with open_memory(tmp_path) as memory:
        model = await _turn(memory, USER_ROW, upload)
        messages = await stored(memory)
    assert upload.seen == [USER_ROW["content"]["experimental_attachments"]]
    assert upload.seen_extra == [{"clientState": {"draft": 3}}]
    rewritten = [{"name": "pixel.png", "contentType": "image/png", "url": "https://cdn.example/pixel.png"}]
    (request,) = model.requests
    assert request.messages[-1].content.experimental_attachments == rewritten  # what the model was given
    user = next(m for m in messages if m.id == "u1")
    expected = {**USER_ROW["content"], "experimental_attachments": rewritten}
    assert canonical(message_to_dict(user)["content"]) == canonical(expected)  # what was stored


async def test_a_ui_message_keeps_its_attachments_reasoning_and_annotations(tmp_path: Path) -> None:
    ui = {"id": "u2", "role": "user", "content": "look", "parts": [{"type": "text", "text": "look"}],
          "experimental_attachments": [{"name": "a.pdf", "contentType": "application/pdf", "url": "https://x/a"}],
          "annotations": [{"k": "v"}], "reasoning": "the user asked to look"}
    async with open_memory(tmp_path) as memory:
        await _turn(memory, ui, UploadAttachments())
        user = next(m for m in await stored(memory) if m.id == "u2")
    assert user.content.experimental_attachments == ui["experimental_attachments"]
    assert user.content.annotations == [{"k": "v"}] and user.content.reasoning == "the user asked to look"


class _Untouched:
    id = "untouched"

    async def process_input(self, args: Any) -> None:
        return None


def _without_stamps(content: dict[str, Any], original: dict[str, Any]) -> dict[str, Any]:
    """``content`` minus the ``createdAt`` an agent stamps on input parts that had none (reference §4.1)."""
    parts = [{k: v for k, v in part.items() if k != "createdAt" or "createdAt" in before}
             for part, before in zip(content["parts"], original["parts"], strict=True)]
    return {**content, "parts": parts}


_turns = itertools.count()


@settings(PROPERTY, max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                             HealthCheck.too_slow])
@given(content=contents.filter(lambda c: bool(c["parts"])))
async def test_every_content_field_of_an_input_message_is_stored(tmp_path: Path, content: dict[str, Any]) -> None:
    row = {"id": "u1", "role": "user", "createdAt": "2025-03-01T09:00:00.000Z", "content": content}
    async with open_memory(tmp_path, name=f"turn-{next(_turns)}.db") as memory:
        await _turn(memory, row, _Untouched())
        user = next(m for m in await stored(memory) if m.id == "u1")
    assert canonical(_without_stamps(message_to_dict(user)["content"], content)) == canonical(content)
